// GEMM through cuBLASLt (cuda/gemm.h) and the bias add of ops::linear
// (tensor/cpu/matmul.cpp on the GPU). matmul takes f32 operands, or bf16/f16 ones with an
// f32 result (Note [16-bit parameters] in autograd/functions.cpp).
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/gemm.h"

namespace triad::cuda {

namespace {

__global__ void add_row_vector_kernel(float* out, const float* bias, int64_t total, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x)
    out[t] += bias[t % n];
}

}  // namespace

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch,
                         int64_t m, int64_t n, int64_t k) {
  if (a.dtype() != DType::bf16 && a.dtype() != DType::f16) require_f32(a, "matmul");
  require_f32(out, "matmul");
  gemm(a, b, out, trans_a, trans_b, batch, m, n, k);
}

void CudaBackend::add_row_vector(const Tensor& out, const Tensor& bias) {
  require_f32(out, "add_row_vector");
  const int64_t n = bias.numel(), total = out.numel();
  if (n == 0 || total == 0) return;
  OnDevice on(out);
  add_row_vector_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(ptr<float>(out), ptr<const float>(bias), total,
                                                                         n);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
