// GEMM through cuBLASLt (cuda/gemm.h), and ops::linear's product with its bias in
// cuBLASLt's bias epilogue (tensor/cpu/matmul.cpp on the GPU). matmul takes f32, bf16 or f16 operands and a result
// of their dtype (16-bit products accumulate in f32 on tensor cores and round once: Note
// [16-bit activations] in autograd/functions.cpp).
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/gemm.h"

namespace triad::cuda {

namespace {

// out = product + bias on every row of n: an f32 bias beside a 16-bit product, which the
// epilogue does not take, added to the unrounded f32 product.
__global__ void add_row_vector_kernel(const float* product, Floats bias, Floats out, int64_t total, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x)
    out.store(t, product[t] + bias.load(t % n));
}

}  // namespace

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch,
                         int64_t m, int64_t n, int64_t k, bool accumulate) {
  require_floating(a, "matmul");
  GemmOptions o;
  o.beta = accumulate ? 1.0 : 0.0;
  gemm(a, b, out, trans_a, trans_b, batch, m, n, k, o);
}

void CudaBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  require_floating(x, "linear");
  GemmOptions o;
  if (bias.defined()) o.epilogue = Epilogue::bias, o.bias = bias;
  const Tensor product = linear_product(x, weight, out, o, !bias.defined() || bias.dtype() == out.dtype());
  const int64_t total = out.numel(), n = weight.size(0);
  if (!product.defined() || total == 0) return;
  OnDevice on(out);
  add_row_vector_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(
      ptr<const float>(product), floats(bias, "linear"), floats(out, "linear"), total, n);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
