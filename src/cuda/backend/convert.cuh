// Element loads and stores by dtype on the device, bit for bit those of tensor/dtype.h (bf16
// and f16 convert with tensor/float16.h's functions, the CPU's own), and counter-based
// random bits identical to tensor/random.h's, so copies and random fills on a GPU
// reproduce the CPU's results exactly. The random bits are host-only inline code there,
// hence the copy here; the GPU op test compares both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/float16.h"

namespace triad::cuda {

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
