// One element of each optimizer update, written once for the CPU backend's loops
// (tensor/cpu/optim.cpp) and the CUDA backend's multi-tensor kernels
// (cuda/backend/multi_tensor_kernels.cuh), so the two run the same arithmetic in the same
// order. T is f32 or f64 (the CPU's gradient checks run f64); the constants are rounded
// to T once, on the host, as the update's hyper-parameters come in double.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tensor/host_device.h"
#include "tensor/optimizer_ops.h"

namespace triad {

// ops::adamw_'s constants, in T (as AdamWTensors::constants stores them in f32: these
// members in this order). skip not 0: the update changes nothing (kAdamWSkip).
template <class T>
struct AdamWConstants {
  T decay, l2, b1, b2, step_size, bc2_sqrt, eps, skip;

  static AdamWConstants of(const AdamWStep& s) {
    return {T(s.adam_w_mode ? 1.0 - s.lr * s.weight_decay : 1.0),
            T(s.adam_w_mode ? 0.0 : s.weight_decay),
            T(s.beta1),
            T(s.beta2),
            T(s.lr / s.bias_correction1),
            T(std::sqrt(s.bias_correction2)),
            T(s.eps),
            T(0)};
  }
};
static_assert(sizeof(AdamWConstants<float>) == kAdamWConstants * sizeof(float) &&
                  offsetof(AdamWConstants<float>, skip) == kAdamWSkip * sizeof(float),
              "AdamWTensors::constants' layout");

// Updates p, m, v in place from gradient g; returns the new p.
template <class T>
TRIAD_HOST_DEVICE inline T adamw_element(T& p, T& m, T& v, T g, const AdamWConstants<T>& k) {
  const T gi = g + k.l2 * p;
  const T mi = m + (gi - m) * (T(1) - k.b1);
  const T vi = v * k.b2 + gi * gi * (T(1) - k.b2);
  m = mi;
  v = vi;
  using std::sqrt;
  p = p * k.decay - k.step_size * mi / (sqrt(vi) / k.bc2_sqrt + k.eps);
  return p;
}

// ops::sgd_'s constants, in T.
template <class T>
struct SGDConstants {
  T neg_lr, momentum, keep, weight_decay;  // keep = 1 - dampening
  bool nesterov, first;                     // first: the momentum buffer starts as the gradient

  static SGDConstants of(const SGDStep& s, bool first) {
    return {T(-s.lr), T(s.momentum), T(1.0 - s.dampening), T(s.weight_decay), s.nesterov, first};
  }
};

// Updates p (and the momentum buffer buf, with momentum) in place from gradient g: the
// L2 term added to the gradient, buf = momentum buf + (1 - dampening) d (buf = d on the
// first step), d = buf (nesterov: d + momentum buf), p += -lr d; each step rounded as
// the composed ops rounded it.
template <class T>
TRIAD_HOST_DEVICE inline T sgd_element(T& p, T* buf, T g, const SGDConstants<T>& k) {
  T d = k.weight_decay != T(0) ? g + k.weight_decay * p : g;
  if (buf) {
    T b = d;
    if (!k.first) {
      const T kept = *buf * k.momentum;
      b = k.keep == T(1) ? kept + d : kept + k.keep * d;
    }
    *buf = b;
    d = k.nesterov ? d + k.momentum * b : b;
  }
  p = p + k.neg_lr * d;
  return p;
}

// optim::clip_coefficient's rule: the factor that clips gradients of norm `norm` to
// max_norm (> 0), max_norm / (norm + 1e-6) when that is below 1, else 1 (a NaN norm: 1).
TRIAD_HOST_DEVICE inline double clip_factor(double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

}  // namespace triad
