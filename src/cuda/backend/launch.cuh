// What every kernel file of the CUDA backend shares: where a method runs (OnDevice), grid
// sizes for grid-stride loops, strided operand offsets, warp and block reductions, and
// the f32 check. Included only by the backend's .cu files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "cuda/check.h"
#include "cuda/stream.h"
#include "tensor/float16.h"
#include "tensor/tensor.h"

namespace triad::cuda {

constexpr int kThreads = 256;
constexpr float kInf = std::numeric_limits<float>::infinity();  // threads of a block in elementwise kernels

// The device of t made current, and the calling thread's current stream on it.
class OnDevice {
 public:
  explicit OnDevice(const Tensor& t) : guard_(t.device().index), stream_(current_stream(t.device().index)) {}
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_;
};

// Blocks for a grid-stride loop over n items: enough to fill the device, no more (each
// thread then takes several items).
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(std::clamp<int64_t>(b, 1, int64_t(1) << 20));
}

// What a method that computes in f32 only takes (see cuda_backend.h).
inline void require_f32(const Tensor& t, const char* method) {
  TRIAD_CHECK(t.dtype() == DType::f32, "cuda backend: " << method << " computes in f32, got " << t.str()
                                                        << " (f64 kernels are CPU-only; they serve gradient checks)");
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// The floating storage a computing method takes: f32, bf16 or f16 (Note [16-bit
// activations] in autograd/functions.cpp).
inline void require_floating(const Tensor& t, const char* method) {
  TRIAD_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16,
              "cuda backend: " << method << " takes f32, bf16 or f16, got " << t.str()
                               << " (in f64 only +, -, *, /, negation, square root and their scalar forms run "
                                  "on a GPU; the rest are CPU-only, for gradient checks)");
}

// A floating operand of a kernel, stored in f32, bf16 or f16: elements load as float and
// store rounded to nearest even, with tensor/float16.h's conversions (the CPU's own, bit
// for bit). The dtype is the same for every thread, so the switch costs no divergence.
struct Floats {
  void* data = nullptr;
  DType dtype = DType::f32;

  __device__ float load(int64_t i) const {
    switch (dtype) {
      case DType::bf16:
        return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
      case DType::f16:
        return f16_to_float(static_cast<const uint16_t*>(data)[i]);
      default:
        return static_cast<const float*>(data)[i];
    }
  }
  __device__ void store(int64_t i, float v) const {
    switch (dtype) {
      case DType::bf16:
        static_cast<uint16_t*>(data)[i] = float_to_bf16(v);
        return;
      case DType::f16:
        static_cast<uint16_t*>(data)[i] = float_to_f16(v);
        return;
      default:
        static_cast<float*>(data)[i] = v;
    }
  }
};

// t as a kernel operand (require_floating checked).
inline Floats floats(const Tensor& t, const char* method) {
  require_floating(t, method);
  return {t.raw_data(), t.dtype()};
}

// ---- strided operands ----

constexpr int kMaxDims = 12;  // after merging dimensions (see make_strided)

// N operands of one shape with their own strides (0 where broadcast), in elements.
template <int N>
struct Strided {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};

  // The element offset of linear (row-major) index i in each operand.
  __device__ void offsets(int64_t i, int64_t (&off)[N]) const {
    if (ndim == 1) {  // the common case after merging: no division
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = i * stride[k][0];
      return;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t q = i / size[d], r = i - q * size[d];
      i = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += r * stride[k][d];
    }
  }
};

// The operands' geometry with size-1 dimensions dropped and dimensions merged wherever
// every operand steps through them as one (a contiguous tensor becomes one dimension).
// Throws Error when more than kMaxDims dimensions remain.
template <int N>
Strided<N> make_strided(const Shape& shape, const std::array<const Shape*, N>& strides, const char* method) {
  Strided<N> g;
  int nd = 0;
  for (int d = 0; d < int(shape.size()); ++d) {
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = g.stride[k][nd - 1] == (*strides[k])[d] * shape[d];
    if (merge) {
      g.size[nd - 1] *= shape[d];
      for (int k = 0; k < N; ++k) g.stride[k][nd - 1] = (*strides[k])[d];
      continue;
    }
    TRIAD_CHECK(nd < kMaxDims, "cuda backend: " << method << " on shape " << shape_str(shape) << " has more than "
                                                << kMaxDims << " dimensions after merging");
    g.size[nd] = shape[d];
    for (int k = 0; k < N; ++k) g.stride[k][nd] = (*strides[k])[d];
    ++nd;
  }
  if (nd == 0) {  // a scalar, or all sizes 1
    g.size[0] = 1;
    nd = 1;
  }
  g.ndim = nd;
  return g;
}

// ---- reductions inside a warp and a block ----

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxFloat {  // fmaxf: a NaN loses
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MaxOp {  // the larger, NaN winning (as the CPU's max_dim)
  template <class T>
  __device__ T operator()(T a, T b) const {
    return (b > a || b != b) ? b : a;
  }
};

template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The reduction of v over the block, returned to every thread. blockDim.x is a multiple of
// 32; `identity` fills the lanes of absent warps.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  static __shared__ T partial[32];  // static: a plain static under the CPU emulation too
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
  return warp_reduce(v, op);
}

// Threads per block for a kernel with one block per row of n elements.
inline int row_threads(int64_t n) { return n <= 256 ? 64 : (n <= 2048 ? 256 : 512); }

}  // namespace triad::cuda
