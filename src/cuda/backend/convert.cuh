// Element loads and stores by dtype on the device, bit for bit those of tensor/dtype.h (bf16
// and f16 convert with tensor/float16.h's functions, the CPU's own), and tensor/random.h's
// counter-based random bits (host and device functions there), so copies and random fills
// on a GPU reproduce the CPU's results exactly; the GPU op test compares both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/float16.h"
#include "tensor/random.h"  // random_bits and random_uniform, for the random fills and dropout

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

}  // namespace triad::cuda
