// Copies with dtype conversion, copies at a position on the device and counters, fills,
// and random fills (tensor/cpu/copy.cpp on the GPU).
// Copies between tensors of one dtype move raw elements of its width (dense ones are one
// cudaMemcpyAsync); conversions go through double exactly as the CPU's do.
#include <cstring>

#include "cuda/backend/convert.cuh"
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/backend/position_kernels.cuh"
#include "tensor/ops.h"

namespace triad::cuda {

namespace {

template <class T>  // an unsigned integer of the element's width
__global__ void copy_kernel(int64_t n, Strided<2> g, T* dst, const T* src) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    g.offsets(i, off);
    dst[off[0]] = src[off[1]];
  }
}

__global__ void convert_kernel(int64_t n, Strided<2> g, void* dst, DType dt, const void* src, DType st) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    g.offsets(i, off);
    store_double(dst, off[0], dt, load_double(src, off[1], st));
  }
}

template <class T>
__global__ void fill_kernel(int64_t n, Strided<1> g, T* dst, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    g.offsets(i, off);
    dst[off[0]] = value;
  }
}

// Box-Muller over counter pairs, as the CPU: elements 2j and 2j+1 share the uniforms of
// pair j. Explicit roundings (__dmul_rn, __dadd_rn) keep the compiler from fusing
// multiply-adds the CPU's code does not have.
__global__ void normal_kernel(int64_t n, void* dst, DType dt, double mean, double stddev, uint64_t seed,
                              uint64_t first) {
  constexpr double kTwoPi = 2.0 * 3.14159265358979323846;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t pair = first + uint64_t(i & ~int64_t(1));
    const double u1 = 1.0 - random_uniform(seed, pair), u2 = random_uniform(seed, pair + 1);
    const double r = sqrt(__dmul_rn(-2.0, log(u1))), theta = __dmul_rn(kTwoPi, u2);
    const double z = (i & 1) ? sin(theta) : cos(theta);
    store_double(dst, i, dt, __dadd_rn(mean, __dmul_rn(__dmul_rn(stddev, r), z)));
  }
}

__global__ void uniform_kernel(int64_t n, void* dst, DType dt, double low, double high, uint64_t seed, uint64_t first) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_double(dst, i, dt, __dadd_rn(low, __dmul_rn(high - low, random_uniform(seed, first + uint64_t(i)))));
}

template <class T>
void launch_copy(const Tensor& dst, const Tensor& src, const Strided<2>& g, cudaStream_t stream) {
  const int64_t n = dst.numel();
  copy_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, g, ptr<T>(dst), ptr<const T>(src));
  TRIAD_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_copy_at(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src, cudaStream_t stream) {
  const int64_t n = src.numel();
  const Tensor first = ops::narrow(dst, dim, 0, src.size(dim));  // dst at position 0
  const Strided<2> g = make_strided<2>(src.shape(), {&first.strides(), &src.strides()}, "copy_at");
  copy_at_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, g, ptr<T>(first), ptr<const T>(src),
                                                            ptr<const int64_t>(index), dst.stride(dim),
                                                            dst.size(dim) - src.size(dim),
                                                            bad_index_sink(dst.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_fill(const Tensor& dst, const Strided<1>& g, T value, cudaStream_t stream) {
  const int64_t n = dst.numel();
  fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, g, ptr<T>(dst), value);
  TRIAD_CUDA_CHECK_LAUNCH();
}

bool is_float_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }

}  // namespace

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  OnDevice on(dst);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() && dst.shape() == src.shape()) {
    TRIAD_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, on.stream()));
    return;
  }
  const Strided<2> g = make_strided<2>(dst.shape(), {&dst.strides(), &src.strides()}, "copy");
  if (dst.dtype() != src.dtype()) {
    convert_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, g, dst.raw_data(), dst.dtype(), src.raw_data(),
                                                                src.dtype());
    TRIAD_CUDA_CHECK_LAUNCH();
    return;
  }
  switch (element_size(dst.dtype())) {
    case 1:
      return launch_copy<uint8_t>(dst, src, g, on.stream());
    case 2:
      return launch_copy<uint16_t>(dst, src, g, on.stream());
    case 4:
      return launch_copy<uint32_t>(dst, src, g, on.stream());
    default:
      return launch_copy<uint64_t>(dst, src, g, on.stream());
  }
}

void CudaBackend::copy_at(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  OnDevice on(dst);
  switch (element_size(dst.dtype())) {
    case 1:
      return launch_copy_at<uint8_t>(dst, dim, index, src, on.stream());
    case 2:
      return launch_copy_at<uint16_t>(dst, dim, index, src, on.stream());
    case 4:
      return launch_copy_at<uint32_t>(dst, dim, index, src, on.stream());
    default:
      return launch_copy_at<uint64_t>(dst, dim, index, src, on.stream());
  }
}

void CudaBackend::increment(const Tensor& dst, int64_t value) {
  OnDevice on(dst);
  const int64_t n = dst.numel();
  increment_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, ptr<int64_t>(dst), value);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  OnDevice on(dst);
  // The element's bits, converted on the host by the CPU's own rules.
  uint64_t bits = 0;
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = from_double<T>(value);
    std::memcpy(&bits, &v, sizeof(T));
  });
  const size_t es = element_size(dst.dtype());
  if (bits == 0 && dst.is_contiguous()) {
    TRIAD_CUDA_CHECK(cudaMemsetAsync(dst.raw_data(), 0, dst.nbytes(), on.stream()));
    return;
  }
  const Strided<1> g = make_strided<1>(dst.shape(), {&dst.strides()}, "fill");
  switch (es) {
    case 1:
      return launch_fill<uint8_t>(dst, g, uint8_t(bits), on.stream());
    case 2:
      return launch_fill<uint16_t>(dst, g, uint16_t(bits), on.stream());
    case 4:
      return launch_fill<uint32_t>(dst, g, uint32_t(bits), on.stream());
    default:
      return launch_fill<uint64_t>(dst, g, bits, on.stream());
  }
}

void CudaBackend::normal(const Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t first) {
  const int64_t n = dst.numel();
  if (n == 0 || !is_float_dtype(dst.dtype())) return;  // as the CPU: other dtypes are left alone
  OnDevice on(dst);
  normal_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, dst.raw_data(), dst.dtype(), mean, stddev, seed, first);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::uniform(const Tensor& dst, double low, double high, uint64_t seed, uint64_t first) {
  const int64_t n = dst.numel();
  if (n == 0 || !is_float_dtype(dst.dtype())) return;
  OnDevice on(dst);
  uniform_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, dst.raw_data(), dst.dtype(), low, high, seed, first);
  TRIAD_CUDA_CHECK_LAUNCH();
}

Backend& cuda_backend() {
  static CudaBackend b;
  return b;
}

}  // namespace triad::cuda
