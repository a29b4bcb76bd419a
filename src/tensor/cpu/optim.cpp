// Optimizer kernels: one pass over parameter, gradient and state (memory-bound), writing a
// 16-bit copy of the parameter in the same pass when asked.
#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/visit_float.h"

namespace triad {

void CpuBackend::adamw(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                       const AdamWStep& s, const Tensor& param_copy) {
  uint16_t* copy = param_copy.defined() ? static_cast<uint16_t*>(param_copy.raw_data()) : nullptr;
  const bool copy_bf16 = param_copy.defined() && param_copy.dtype() == DType::bf16;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    const T decay = T(s.adam_w_mode ? 1.0 - s.lr * s.weight_decay : 1.0), l2 = T(s.adam_w_mode ? 0.0 : s.weight_decay);
    const T b1 = T(s.beta1), b2 = T(s.beta2);
    const T step_size = T(s.lr / s.bias_correction1), bc2_sqrt = T(std::sqrt(s.bias_correction2)), eps = T(s.eps);
    const int64_t n = param.numel();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] + l2 * p[i];
      const T mi = m[i] + (gi - m[i]) * (T(1) - b1);
      const T vi = v[i] * b2 + gi * gi * (T(1) - b2);
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
      if (copy) copy[i] = copy_bf16 ? float_to_bf16(float(p[i])) : float_to_f16(float(p[i]));
    }
  };
  cpu::visit_float(param.dtype(), run);
}

}  // namespace triad
