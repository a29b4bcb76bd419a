// The source tensor of the block-quantization kernel tests (test_quantize_kernels_emulated,
// test_quantize_cuda): rows x n values in [-2, 2) with, in row 0, a block of zeros, one
// below 2^-119, one with a NaN and one with an infinity (blocks of 64), in `dtype`.
#pragma once

#include <cmath>
#include <limits>

#include "tensor/ops.h"
#include "tensor/random.h"

namespace triad::test {

inline Tensor quantize_source(int64_t rows, int64_t n, DType dtype) {
  Tensor t = Tensor::empty({rows, n});
  Generator g(11);
  ops::uniform_(t, -2, 2, g);
  float* p = t.data<float>();
  for (int64_t i = 0; i < 64; ++i) {
    p[i] = 0.0f;
    p[64 + i] = std::ldexp(1.0f, -121);
  }
  p[2 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
  p[3 * 64 + 63] = -std::numeric_limits<float>::infinity();
  return ops::to(t, dtype);
}

}  // namespace triad::test
