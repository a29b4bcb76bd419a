// The normalisation of one row of a layer norm or an RMS norm, shared by the plain norms
// (nn.cu) and the residual-fused ones (fused_kernels.cuh): a block per row, the row's
// values `v` (the input, or the residual sum already stored) and their sum (layer norm) or
// sum of squares (RMS norm) accumulated per thread by the caller. Computed in f32.
#pragma once

#include <cstdint>

#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

// y = (v - mean) rstd w + b over row i of c columns; `s` is this thread's part of the sum.
__device__ inline void layer_norm_row(Floats v, Floats w, Floats b, float eps, Floats y, float* mean, float* rstd,
                                      int64_t i, int64_t c, float s) {
  const int64_t row = i * c;
  const float mu = block_reduce(s, SumOp{}, 0.0f) / float(c);
  float var = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float d = v.load(row + j) - mu;
    var += d * d;
  }
  const float rs = 1.0f / sqrtf(block_reduce(var, SumOp{}, 0.0f) / float(c) + eps);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    y.store(row + j, (v.load(row + j) - mu) * rs * w.load(j) + b.load(j));
  if (threadIdx.x == 0) {
    mean[i] = mu;
    rstd[i] = rs;
  }
}

// y = v rstd w over row i of c columns; `ss` is this thread's part of the sum of squares.
__device__ inline void rms_norm_row(Floats v, Floats w, float eps, Floats y, float* rstd, int64_t i, int64_t c,
                                    float ss) {
  const int64_t row = i * c;
  const float rs = 1.0f / sqrtf(block_reduce(ss, SumOp{}, 0.0f) / float(c) + eps);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) y.store(row + j, v.load(row + j) * rs * w.load(j));
  if (threadIdx.x == 0) rstd[i] = rs;
}

}  // namespace

}  // namespace triad::cuda
