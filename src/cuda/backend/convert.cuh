// Element conversions on the device, bit for bit those of tensor/dtype.h (bf16 and f16
// round to nearest even the same way, NaN keeps the same bits), and counter-based random
// bits identical to tensor/random.h's, so copies and random fills on a GPU reproduce the
// CPU's results exactly. The CPU functions are host-only inline code, hence the copies;
// the GPU op test compares both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace triad::cuda {

__device__ inline float bf16_to_float(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

__device__ inline uint16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

__device__ inline uint16_t float_to_f16(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow to inf
  if (absx < 0x38800000u) {                                  // subnormal or zero
    if (absx < 0x33000000u) return uint16_t(sign);
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(absx >> 23);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = absx - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

__device__ inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else {
    u = sign | (exp + 112) << 23 | mant << 13;
  }
  return __uint_as_float(u);
}

// Element i of p (of dtype t) as double: to_double of tensor/dtype.h.
__device__ inline double load_double(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::f32:
      return double(static_cast<const float*>(p)[i]);
    case DType::f64:
      return static_cast<const double*>(p)[i];
    case DType::bf16:
      return double(bf16_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::f16:
      return double(f16_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::i64:
      return double(static_cast<const int64_t*>(p)[i]);
    case DType::i32:
      return double(static_cast<const int32_t*>(p)[i]);
    case DType::i8:
      return double(static_cast<const int8_t*>(p)[i]);
  }
  return 0.0;
}

// v stored as element i of p (of dtype t): from_double of tensor/dtype.h.
__device__ inline void store_double(void* p, int64_t i, DType t, double v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = float(v);
      return;
    case DType::f64:
      static_cast<double*>(p)[i] = v;
      return;
    case DType::bf16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v));
      return;
    case DType::f16:
      static_cast<uint16_t*>(p)[i] = float_to_f16(float(v));
      return;
    case DType::i64:
      static_cast<int64_t*>(p)[i] = int64_t(v);
      return;
    case DType::i32:
      static_cast<int32_t*>(p)[i] = int32_t(v);
      return;
    case DType::i8:
      static_cast<int8_t*>(p)[i] = int8_t(v);
      return;
  }
}

// tensor/random.h's random_bits and random_uniform.
__device__ inline uint64_t random_bits(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + counter * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  z = (z ^ (z >> 29)) * 0xd6e8feb86659fd93ull;
  return z ^ (z >> 32);
}

__device__ inline double random_uniform(uint64_t seed, uint64_t counter) {
  return double(random_bits(seed, counter) >> 11) * 0x1.0p-53;
}

}  // namespace triad::cuda
