// Views, copies and conversions of tensor/ops.h.
#include <algorithm>
#include <atomic>
#include <numeric>

#include "tensor/backend.h"
#include "tensor/device_runtime.h"
#include "tensor/ops.h"
#include "tensor/ops_checks.h"

namespace triad::ops {

namespace {

Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

Shape infer_shape(Shape shape, int64_t n, const char* op, const Shape& from) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TRIAD_CHECK(infer < 0, op << ": only one dimension may be -1 in " << shape_str(shape));
      infer = int(i);
    } else {
      TRIAD_CHECK(shape[i] >= 0, op << ": invalid size " << shape[i] << " in " << shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TRIAD_CHECK(known > 0 && n % known == 0,
                op << ": cannot reshape " << shape_str(from) << " into " << shape_str(shape));
    shape[infer] = n / known;
  }
  TRIAD_CHECK(numel(shape) == n,
              op << ": cannot reshape " << shape_str(from) << " (" << n << " elements) into " << shape_str(shape));
  return shape;
}

// Strides for viewing t as `shape` without copying, if possible (each group of merged or
// split dimensions must be contiguous within itself). Empty optional when impossible.
bool view_strides(const Tensor& t, const Shape& shape, Shape& out) {
  if (t.is_contiguous()) {
    out = contiguous_strides(shape);
    return true;
  }
  // Walk old and new dimensions together, matching products of sizes (PyTorch's rule).
  const Shape& os = t.shape();
  const Shape& ost = t.strides();
  out.assign(shape.size(), 0);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor view(const Tensor& t, Shape shape) {
  shape = infer_shape(std::move(shape), t.numel(), "view", t.shape());
  Shape strides;
  TRIAD_CHECK(view_strides(t, shape, strides), "view: a tensor of shape "
                                                   << shape_str(t.shape()) << " and strides " << shape_str(t.strides())
                                                   << " cannot be viewed as " << shape_str(shape) << " (use reshape)");
  return make_view(t, shape, strides, t.offset());
}

Tensor reshape(const Tensor& t, Shape shape) {
  shape = infer_shape(std::move(shape), t.numel(), "reshape", t.shape());
  Shape strides;
  if (view_strides(t, shape, strides)) return make_view(t, shape, strides, t.offset());
  return view(contiguous(t), shape);
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  const int a = normalize_dim(dim0, t.dim(), "transpose"), b = normalize_dim(dim1, t.dim(), "transpose");
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return make_view(t, shape, strides, t.offset());
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  TRIAD_CHECK(int(dims.size()) == t.dim(), "permute: " << dims.size() << " dimensions given for a " << t.dim()
                                                       << "-d tensor of shape " << shape_str(t.shape()));
  Shape shape(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int d = normalize_dim(dims[i], t.dim(), "permute");
    TRIAD_CHECK(!seen[d], "permute: dimension " << d << " repeated for a tensor of shape " << shape_str(t.shape()));
    seen[d] = true;
    shape[i] = t.shape()[d];
    strides[i] = t.strides()[d];
  }
  return make_view(t, shape, strides, t.offset());
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  const int d = normalize_dim(dim, t.dim(), "narrow");
  TRIAD_CHECK(start >= 0 && length >= 0 && start + length <= t.shape()[d],
              "narrow: range [" << start << ", " << start + length << ") out of bounds for dimension " << d
                                << " of size " << t.shape()[d] << " in shape " << shape_str(t.shape()));
  Shape shape = t.shape();
  shape[d] = length;
  return make_view(t, shape, t.strides(), t.offset() + start * t.strides()[d]);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  const int d = normalize_dim(dim, t.dim(), "select");
  const int64_t n = t.shape()[d];
  TRIAD_CHECK(index >= -n && index < n, "select: index " << index << " out of range for dimension " << d << " of size "
                                                         << n << " in shape " << shape_str(t.shape()));
  if (index < 0) index += n;
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(t, shape, strides, t.offset() + index * t.strides()[d]);
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  const int d = normalize_dim(dim, t.dim() + 1, "unsqueeze");
  Shape shape = t.shape(), strides = t.strides();
  const int64_t s = d < t.dim() ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, s);
  return make_view(t, shape, strides, t.offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  const int d = normalize_dim(dim, t.dim(), "squeeze");
  TRIAD_CHECK(t.shape()[d] == 1, "squeeze: dimension " << d << " of shape " << shape_str(t.shape()) << " has size "
                                                       << t.shape()[d] << ", expected 1");
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(t, shape, strides, t.offset());
}

Tensor expand(const Tensor& t, const Shape& shape) {
  TRIAD_CHECK(shape.size() >= size_t(t.dim()),
              "expand: cannot expand " << shape_str(t.shape()) << " to " << shape_str(shape));
  const size_t lead = shape.size() - t.dim();
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < size_t(t.dim()); ++i) {
    const int64_t from = t.shape()[i], to = shape[lead + i];
    TRIAD_CHECK(from == to || from == 1,
                "expand: cannot expand " << shape_str(t.shape()) << " to " << shape_str(shape));
    strides[lead + i] = from == to ? t.strides()[i] : 0;
  }
  return make_view(t, shape, strides, t.offset());
}

Tensor flatten(const Tensor& t) { return reshape(t, {t.numel()}); }

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

Tensor clone(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  backend_for(t.device()).copy(out, t);
  return out;
}

namespace {

std::atomic<uint64_t> g_conversions{0};

void count_conversion(DType to, DType from) {
  if (to != from && is_floating(to) && is_floating(from)) g_conversions.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

uint64_t conversion_count() { return g_conversions.load(std::memory_order_relaxed); }

Tensor to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  count_conversion(dtype, t.dtype());
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  backend_for(t.device()).copy(out, t);
  return out;
}

Tensor to(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  // Every crossing goes through the host, by the device's runtime (device_runtime.h; the
  // CUDA one stages through pinned buffers). A build without the backend has none, and
  // device_runtime says so.
  if (t.device().is_cpu()) return device_runtime(device).to_device(t, device);
  const Tensor host = device_runtime(t.device()).to_host(t);
  return device.is_cpu() ? host : device_runtime(device).to_device(host, device);
}

void copy_(const Tensor& dst, const Tensor& src) {
  TRIAD_CHECK(dst.device() == src.device(),
              "copy_: source on " << src.device().str() << ", destination on " << dst.device().str());
  broadcast_shapes(dst.shape(), src.shape(), "copy_");
  count_conversion(dst.dtype(), src.dtype());
  Tensor s = expand(src, dst.shape());
  backend_for(dst.device()).copy(dst, s);
}

void fill_(const Tensor& dst, double value) { backend_for(dst.device()).fill(dst, value); }

void check_device_position(const Tensor& t, Device device, const char* op, const char* name) {
  TRIAD_CHECK(t.defined() && t.dtype() == DType::i64 && t.shape() == Shape{1} && t.device() == device,
              op << ": " << name << " must be (1,) i64 on " << device.str() << ", got "
                 << (t.defined() ? t.str() : std::string("an undefined tensor")));
}

void copy_at_(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  TRIAD_CHECK(dst.dtype() == src.dtype() && dst.device() == src.device(),
              "copy_at_: source " << src.str() << " and destination " << dst.str() << " differ in dtype or device");
  TRIAD_CHECK(dst.dim() == src.dim() && dim >= 0 && dim < dst.dim(),
              "copy_at_: dimension " << dim << " of " << dst.str() << " and " << src.str());
  for (int64_t d = 0; d < dst.dim(); ++d)
    TRIAD_CHECK(d == dim ? src.size(d) <= dst.size(d) : src.size(d) == dst.size(d),
                "copy_at_: source " << shape_str(src.shape()) << " does not fit destination " << shape_str(dst.shape())
                                    << " along dimension " << dim);
  check_device_position(index, dst.device(), "copy_at_", "index");
  if (src.numel() > 0) backend_for(dst.device()).copy_at(dst, dim, index, src);
}

void increment_(const Tensor& dst, int64_t value) {
  TRIAD_CHECK(dst.dtype() == DType::i64 && dst.is_contiguous(),
              "increment_: expected a contiguous i64 tensor, got " << dst.str());
  if (dst.numel() > 0) backend_for(dst.device()).increment(dst, value);
}

void normal_(const Tensor& dst, double mean, double stddev, Generator& gen) {
  TRIAD_CHECK(is_floating(dst.dtype()) && dst.is_contiguous(),
              "normal_: expected a contiguous floating tensor, got " << dst.str());
  const uint64_t first = gen.advance(uint64_t(dst.numel() + 1) / 2 * 2);
  backend_for(dst.device()).normal(dst, mean, stddev, gen.state().seed, first);
}

void uniform_(const Tensor& dst, double low, double high, Generator& gen) {
  TRIAD_CHECK(is_floating(dst.dtype()) && dst.is_contiguous(),
              "uniform_: expected a contiguous floating tensor, got " << dst.str());
  const uint64_t first = gen.advance(uint64_t(dst.numel()));
  backend_for(dst.device()).uniform(dst, low, high, gen.state().seed, first);
}

}  // namespace triad::ops
