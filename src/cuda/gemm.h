// Matrix products on the GPU through cuBLASLt: the CUDA backend's matmul, and an entry
// point with fused epilogues (bias, GELU) for layers that run on a GPU.
//
// Note [cuBLASLt GEMM]:
// - triad's tensors are row-major and cuBLASLt's matrices column-major. A row-major
//   (M, N) matrix is the column-major (N, M) one, so out = op(a) op(b) is computed as
//   out^T = op(b)^T op(a)^T: cuBLASLt's first operand is b, its second a, with the same
//   transpose flags. A bias of length N is then a bias per row of cuBLASLt's output,
//   which is what its bias epilogue adds.
// - Batches are strided (one call for all); a 2-D b shared by every batch is a stride of
//   0, or, when a is not transposed, one GEMM of (batch * M) rows.
// - f32 operands compute in fp32 (CUBLAS_COMPUTE_32F: no TF32), as the CPU backend does;
//   bf16 and f16 operands accumulate in fp32 and round once on output, or are not rounded
//   at all when the output is f32.
// - A plan (operation and layout descriptors, the algorithm cuBLASLt's heuristic picks) is
//   made once per shape, dtype, epilogue and pointer alignment and cached for the process,
//   so a training step costs no heuristic queries after the first.
// - Each stream has a 32 MiB workspace (the size NVIDIA recommends for Hopper), taken once
//   from the device's caching allocator and kept.
#pragma once

#include <cstddef>

#include "tensor/tensor.h"

namespace triad::cuda {

enum class Epilogue {
  none,
  bias,       // out = op(a) op(b) + bias
  gelu,       // out = GELU(op(a) op(b))              (tanh approximation, as ops::gelu)
  bias_gelu,  // out = GELU(op(a) op(b) + bias)
};

struct GemmOptions {
  Epilogue epilogue = Epilogue::none;
  Tensor bias;      // (N,) of out's dtype, for bias and bias_gelu
  Tensor pre_gelu;  // optional with gelu/bias_gelu: receives the GELU's input (out's shape,
                    // dtype), which its backward needs; N must be a multiple of 8
  double alpha = 1.0;
  double beta = 0.0;  // out = alpha (product) + beta out, before the epilogue's bias/GELU
};

// out (batch, M, N) = op(a) op(b): a (batch, M, K), or (batch, K, M) when trans_a; b (K, N),
// or (N, K) when trans_b, either 2-D (shared by every batch) or with a's batch. All three
// contiguous on one CUDA device; a and b both f32, both bf16 or both f16; out of their
// dtype or f32 (bias and pre_gelu then of out's dtype). Runs on the device's current
// stream. Throws Error on a mismatch, and when cuBLASLt has no algorithm for it.
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch, int64_t m,
          int64_t n, int64_t k, const GemmOptions& options = {});

// ops::linear's product x (rows, K) @ weight (N, K)^T into out (rows, N) with the epilogue
// of `options` when `fits` (returning an undefined tensor); else the bare product, as f32
// of out's shape, which the caller's kernel finishes (an f32 bias beside a 16-bit product,
// a width the GELU's auxiliary output does not take). The backends' linear and linear_gelu.
Tensor linear_product(const Tensor& x, const Tensor& weight, const Tensor& out, const GemmOptions& options, bool fits);

// ops::linear with fused epilogues: x (..., in) @ weight (out, in)^T + bias (out,) (bias may
// be undefined), then GELU when `gelu`. With pre_gelu (and gelu), *pre_gelu receives the
// GELU's input. x, weight, bias: contiguous, one device, one dtype (f32, bf16 or f16).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu = false, Tensor* pre_gelu = nullptr);

// Plans cached so far (tests check that a repeated shape adds none).
size_t gemm_plan_count();

}  // namespace triad::cuda
