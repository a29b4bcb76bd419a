// Optimizer kernels (tensor/cpu/optim.cpp on the GPU): one pass over parameter, gradient
// and moments, memory-bound, in the CPU's arithmetic and order; with a 16-bit copy of the
// parameter (mixed precision) written in the same pass.
#include <cmath>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

struct AdamWConstants {
  float decay, l2, b1, b2, step_size, bc2_sqrt, eps;
};

// copy.data null: no copy.
__global__ void adamw_kernel(int64_t n, float* p, const float* g, float* m, float* v, AdamWConstants k, Floats copy) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] + k.l2 * p[i];
    const float mi = m[i] + (gi - m[i]) * (1.0f - k.b1);
    const float vi = v[i] * k.b2 + gi * gi * (1.0f - k.b2);
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * k.decay - k.step_size * mi / (sqrtf(vi) / k.bc2_sqrt + k.eps);
    p[i] = pi;
    if (copy.data) copy.store(i, pi);
  }
}

}  // namespace

void CudaBackend::adamw(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                        const AdamWStep& s, const Tensor& param_copy) {
  require_f32(param, "adamw");
  const int64_t n = param.numel();
  if (n == 0) return;
  OnDevice on(param);
  const AdamWConstants k{float(s.adam_w_mode ? 1.0 - s.lr * s.weight_decay : 1.0),
                         float(s.adam_w_mode ? 0.0 : s.weight_decay),
                         float(s.beta1),
                         float(s.beta2),
                         float(s.lr / s.bias_correction1),
                         float(std::sqrt(s.bias_correction2)),
                         float(s.eps)};
  const Floats copy = param_copy.defined() ? floats(param_copy, "adamw") : Floats{};
  adamw_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, ptr<float>(param), ptr<const float>(grad),
                                                            ptr<float>(exp_avg), ptr<float>(exp_avg_sq), k, copy);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
