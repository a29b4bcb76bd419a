#include "tensor/tensor.h"

#include <atomic>

#include "tensor/backend.h"
#include "tensor/host_reads.h"
#include "tensor/ops.h"

namespace triad {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) TRIAD_CHECK(d >= 0, "Tensor::empty: negative dimension in shape " << shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(triad::numel(shape)) * element_size(dtype), allocator_for(device));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  ops::fill_(t, value);
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Shape& strides, int64_t offset,
                            DType dtype) {
  TRIAD_CHECK(shape.size() == strides.size(), "Tensor::from_storage: shape " << shape_str(shape) << " and strides "
                                                                             << shape_str(strides)
                                                                             << " differ in rank");
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    TRIAD_CHECK(shape[i] >= 0 && strides[i] >= 0, "Tensor::from_storage: negative size or stride");
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  }
  const bool empty_tensor = triad::numel(shape) == 0;
  TRIAD_CHECK(offset >= 0 && (empty_tensor || size_t(last + 1) * element_size(dtype) <= storage->nbytes()),
              "Tensor::from_storage: shape " << shape_str(shape) << " at offset " << offset
                                             << " does not fit in a storage of " << storage->nbytes() << " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t dim) const { return shape()[normalize_dim(dim, this->dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[normalize_dim(dim, this->dim(), "Tensor::stride")]; }

void Tensor::throw_undefined() { throw Error("use of an undefined tensor"); }

// is_contiguous runs on every collective call (argument checks), so it reads the impl once
// instead of through the accessors.
bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  for (int64_t n : t.shape)
    if (n == 0) return true;  // no elements: any strides describe them
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

namespace {
std::atomic<uint64_t> g_host_reads{0};
}  // namespace

uint64_t host_reads() { return g_host_reads.load(std::memory_order_relaxed); }

double Tensor::item() const {
  TRIAD_CHECK(numel() == 1,
              "Tensor::item: tensor of shape " << shape_str(shape()) << " has " << numel() << " elements, expected 1");
  const Tensor host = ops::to(*this, Device::cpu());
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  return host.at(std::vector<int64_t>(dim(), 0));
}

double Tensor::at(const std::vector<int64_t>& index) const {
  TRIAD_CHECK(int(index.size()) == dim(), "Tensor::at: " << index.size() << " indices for a " << dim() << "-d tensor");
  TRIAD_CHECK(device().is_cpu(), "Tensor::at: tensor is on " << device().str() << ", expected cpu");
  int64_t off = 0;
  for (int i = 0; i < dim(); ++i) {
    TRIAD_CHECK(index[i] >= 0 && index[i] < shape()[i],
                "Tensor::at: index " << index[i] << " out of range for dimension " << i << " of size " << shape()[i]);
    off += index[i] * strides()[i];
  }
  return visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    return to_double(static_cast<const T*>(raw_data())[off]);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  Tensor c = ops::contiguous(ops::to(ops::to(*this, Device::cpu()), dtype_of<T>::value));
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return std::string("Tensor(") + dtype_name(dtype()) + ", " + shape_str(shape()) + ", " + device().str() + ")";
}

}  // namespace triad
