// The kernels of the CUDA backend's block-wise quantization (quantize.cu launches them).
// They repeat the arithmetic of the CPU kernels (tensor/cpu/quantize.cpp) step for step:
// the same integer max over |x|'s bits, the same two f32 divisions for scale and inverse,
// the same rounding and clamp, so q and scales match the CPU's bit for bit, and a single
// slice dequantizes to the same values. They live in a header of their own so that
// tests/cuda/test_quantize_kernels_emulated.cpp can run them on the CPU under an emulation
// of CUDA.
#pragma once

#include <cstdint>

#include "cuda/backend/convert.cuh"
#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

// Reads of the three storage types as f32, and writes from f32 (rounding as tensor/dtype.h).
struct LoadF32 {
  using type = float;
  __device__ float operator()(const float* p, int64_t i) const { return p[i]; }
};
struct LoadBf16 {
  using type = uint16_t;
  __device__ float operator()(const uint16_t* p, int64_t i) const { return bf16_to_float(p[i]); }
};
struct LoadF16 {
  using type = uint16_t;
  __device__ float operator()(const uint16_t* p, int64_t i) const { return f16_to_float(p[i]); }
};
struct StoreF32 {
  using type = float;
  __device__ void operator()(float* p, int64_t i, float v) const { p[i] = v; }
};
struct StoreBf16 {
  using type = uint16_t;
  __device__ void operator()(uint16_t* p, int64_t i, float v) const { p[i] = float_to_bf16(v); }
};
struct StoreF16 {
  using type = uint16_t;
  __device__ void operator()(uint16_t* p, int64_t i, float v) const { p[i] = float_to_f16(v); }
};

constexpr uint32_t kQuantInfBits = 0x7f800000u;                  // |x| bits at or above: not finite
constexpr uint32_t kQuantFlushBits = uint32_t(127 - 119) << 23;  // 2^-119: below, the block is zero
constexpr uint32_t kQuantNaNBits = 0x7fc00000u;                  // std::numeric_limits<float>::quiet_NaN()

template <int Bits>
struct QuantGeometry {
  static constexpr float qmax = Bits == 8 ? 127.0f : 7.0f;
  int64_t rows, n, block;
  __device__ int64_t per_row() const { return (n + block - 1) / block; }
  __device__ int64_t row_bytes() const { return Bits == 8 ? n : (n + 1) / 2; }
};

__device__ inline int quantize_one(float x, float inv, float qmax) {
  const float v = rintf(x * inv);
  return int(v < -qmax ? -qmax : (v > qmax ? qmax : v));
}

// Grid-stride over quantization blocks, one thread block each: the block's max |x| (as
// bits), its scale, then every thread quantizes its elements (at 4 bits: its bytes).
template <int Bits, class Load>
__global__ void quantize_kernel(const typename Load::type* src, int8_t* q, float* scales, QuantGeometry<Bits> g,
                                Load load) {
  const int64_t per_row = g.per_row(), row_bytes = g.row_bytes(), total = g.rows * per_row;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const int64_t r = t / per_row, begin = (t - r * per_row) * g.block;
    const int64_t len = g.n - begin < g.block ? g.n - begin : g.block;
    const typename Load::type* x = src + r * g.n + begin;
    int8_t* qb = q + r * row_bytes + begin * Bits / 8;  // begin is even at 4 bits
    uint32_t m = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const uint32_t a = __float_as_uint(load(x, i)) & 0x7fffffffu;
      m = a > m ? a : m;
    }
    m = block_reduce(m, MaxOp{}, 0u);
    float scale = 0.0f, inv = 0.0f;  // inv 0: every q of the block is 0
    if (m >= kQuantInfBits) {
      scale = __uint_as_float(kQuantNaNBits);
    } else if (m >= kQuantFlushBits) {
      const float mx = __uint_as_float(m);
      scale = mx / g.qmax;
      inv = g.qmax / mx;
    }
    if (threadIdx.x == 0) scales[t] = scale;
    if constexpr (Bits == 8) {
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
        qb[i] = int8_t(inv == 0.0f ? 0 : quantize_one(load(x, i), inv, g.qmax));
    } else {
      for (int64_t i = threadIdx.x; i < (len + 1) / 2; i += blockDim.x) {
        if (inv == 0.0f) {
          qb[i] = 0;
          continue;
        }
        const int lo = quantize_one(load(x, 2 * i), inv, g.qmax);
        const int hi = 2 * i + 1 < len ? quantize_one(load(x, 2 * i + 1), inv, g.qmax) : 0;
        qb[i] = int8_t((lo & 15) | hi * 16);
      }
    }
  }
}

// Grid-stride over the output's units (elements; at 4 bits bytes, two elements each):
// output row r is the sum over j < k of input row r k + j, added in order of j in f32.
template <int Bits, class Store>
__global__ void dequantize_kernel(const int8_t* q, const float* scales, typename Store::type* out,
                                  QuantGeometry<Bits> g, int64_t k, Store store) {
  const int64_t per_row = g.per_row(), row_bytes = g.row_bytes(), total = g.rows * row_bytes;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / row_bytes, u = t - r * row_bytes, e = Bits == 8 ? u : 2 * u, b = e / g.block;
    float lo = 0.0f, hi = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = r * k + j;
      const float s = scales[row * per_row + b];
      const int v = q[row * row_bytes + u];
      if constexpr (Bits == 8) {
        lo += float(v) * s;
      } else {
        lo += float(((v & 15) ^ 8) - 8) * s;  // low nibble, sign-extended
        hi += float(v >> 4) * s;
      }
    }
    store(out, r * g.n + e, lo);
    if (Bits == 4 && e + 1 < g.n) store(out, r * g.n + e + 1, hi);
  }
}

}  // namespace

}  // namespace triad::cuda
