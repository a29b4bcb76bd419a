// Tensor: a handle to (Storage, shape, strides, offset, dtype). Copying a Tensor copies the
// handle, not the data; views (ops::reshape, transpose, narrow, ...) share the Storage.
//
// The tensor layer knows nothing of gradients. A tensor carries one opaque slot, the
// AutogradMeta, which only the autograd layer defines and reads (Note [Autograd slot]).
// Raw operations live in triad::ops (tensor/ops.h); the differentiable operations a model
// is written with live in triad:: (autograd/functions.h) and call these.
#pragma once

#include <memory>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace triad {

// Note [Autograd slot]: defined in autograd/meta.h. A null slot means "no gradient
// tracking", which is the state of every tensor the autograd layer has not touched.
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // New tensors. Contents of `empty` are uninitialized.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu()) {
    return full(shape, 1.0, dtype, device);
  }
  static Tensor scalar(double value, DType dtype = DType::f32) { return full({}, value, dtype); }
  // A CPU tensor holding a copy of `values` (row-major), shaped `shape`.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // A tensor over `storage` with explicit geometry (checked to lie inside the storage).
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Shape& strides, int64_t offset,
                             DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int dim() const { return int(impl().shape.size()); }
  int64_t numel() const { return triad::numel(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage ? impl().storage->device() : Device::cpu(); }
  size_t nbytes() const { return size_t(numel()) * element_size(dtype()); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }

  // Pointer to the first element (offset applied). T must match the dtype.
  template <class T>
  T* data() const;
  void* raw_data() const {
    const TensorImpl& t = impl();
    char* data = t.storage ? static_cast<char*>(t.storage->data()) : nullptr;
    return data == nullptr ? nullptr : data + t.offset * int64_t(element_size(t.dtype));
  }

  // The value of a one-element tensor, converted to double. A device tensor's value is
  // copied to the host, which waits for the device to compute it.
  double item() const;
  // Element at a multi-index of a cpu tensor, as double (slow; for tests and debugging).
  double at(const std::vector<int64_t>& index) const;
  // A copy of the contents as a row-major vector of T (converted from the dtype).
  template <class T>
  std::vector<T> to_vector() const;

  // Identity of the handle: two Tensors are the same tensor when they share an impl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // Inline, with the error out of line: every accessor goes through it.
  TensorImpl& impl() const {
    if (impl_ == nullptr) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  std::string str() const;  // "Tensor(f32, (2, 3), cpu)"

 private:
  [[noreturn, gnu::cold]] static void throw_undefined();
  std::shared_ptr<TensorImpl> impl_;
};

template <class T>
T* Tensor::data() const {
  TRIAD_CHECK(dtype() == dtype_of<T>::value, "Tensor::data: tensor holds " << dtype_name(dtype()) << ", accessed as "
                                                                           << dtype_name(dtype_of<T>::value));
  return static_cast<T*>(raw_data());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  TRIAD_CHECK(int64_t(values.size()) == triad::numel(shape),
              "Tensor::from_vector: " << values.size() << " values for shape " << shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace triad
