// Optimizer kernels: one pass over parameter, gradient and state (memory-bound), writing a
// 16-bit copy of the parameter in the same pass when asked; the elements' arithmetic is
// tensor/optimizer_math.h's, which the CUDA backend runs too. Tensor by tensor: the
// parallel loop is inside each. Also the gradient norm's forms that stay on the device
// (ops::squared_norm, ops::clip_to_norm_).
#include <cmath>
#include <cstring>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/visit_float.h"
#include "tensor/loss_scale_math.h"
#include "tensor/optimizer_math.h"

namespace triad {

void CpuBackend::adamw(const std::vector<AdamWTensors>& updates) {
  for (const AdamWTensors& u : updates) {
    uint16_t* copy = u.param_copy.defined() ? static_cast<uint16_t*>(u.param_copy.raw_data()) : nullptr;
    const bool copy_bf16 = u.param_copy.defined() && u.param_copy.dtype() == DType::bf16;
    cpu::visit_float(u.param.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = u.param.data<T>();
      const T* g = u.grad.data<T>();
      T* m = u.exp_avg.data<T>();
      T* v = u.exp_avg_sq.data<T>();
      AdamWConstants<T> k = AdamWConstants<T>::of(u.step);
      if (u.constants.defined()) std::memcpy(&k, u.constants.raw_data(), sizeof k);  // (T is float: checked)
      if (k.skip != T(0)) return;
      const int64_t n = u.param.numel();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const T pi = adamw_element(p[i], m[i], v[i], g[i], k);
        if (copy) copy[i] = copy_bf16 ? float_to_bf16(float(pi)) : float_to_f16(float(pi));
      }
    });
  }
}

void CpuBackend::sgd(const std::vector<SGDTensors>& updates, const SGDStep& step) {
  for (const SGDTensors& u : updates)
    cpu::visit_float(u.param.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = u.param.data<T>();
      const T* g = u.grad.data<T>();
      T* buf = u.momentum_buffer.defined() ? u.momentum_buffer.data<T>() : nullptr;
      const SGDConstants<T> k = SGDConstants<T>::of(step, u.first);
      const int64_t n = u.param.numel();
#pragma omp parallel for if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) sgd_element(p[i], buf ? buf + i : nullptr, g[i], k);
    });
}

void CpuBackend::sum_squares_to(const std::vector<Tensor>& tensors, const Tensor& out) {
  out.data<double>()[0] = sum_squares(tensors);
}

void CpuBackend::clip_to_norm(const std::vector<Tensor>& grads, const Tensor& squared, double max_norm) {
  const double coef = clip_factor(std::sqrt(squared.data<double>()[0]), max_norm);
  if (coef >= 1.0) return;
  const float f = float(coef);  // as mul_ multiplies an f32 tensor
  for (const Tensor& g : grads) {
    float* p = g.data<float>();
    const int64_t n = g.numel();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  }
}

void CpuBackend::mul_by(const std::vector<Tensor>& tensors, const Tensor& factor) {
  const float f = float(factor.data<double>()[0]);  // as mul_ multiplies an f32 tensor
  for (const Tensor& t : tensors) {
    float* p = t.data<float>();
    const int64_t n = t.numel();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  }
}

void CpuBackend::loss_scale_step(const Tensor& squared, const Tensor& state, const Tensor& ring,
                                 const Tensor& constants, const Tensor& outcome, const LossScaleRule& rule) {
  triad::loss_scale_step(squared.data<double>(), state.data<double>(), ring.data<double>(), ring.size(0),
                         constants.size(0), constants.data<float>(), outcome.data<double>(), rule);
}

}  // namespace triad
