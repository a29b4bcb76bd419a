// One feature pair of the fused rotary embedding (ops::rotary, ops::rotary_backward),
// written once for the CPU backend's loop (tensor/cpu/elementwise.cpp) and the CUDA
// backend's kernel (cuda/backend/fused_kernels.cuh), so the two round the same way. Each
// result is one fused multiply-add of the other term's rounded product: a compiler cannot
// contract it differently on either device, so the CPU's and the GPU's bits agree.
#pragma once

#include <cmath>

#include "tensor/host_device.h"

namespace triad {

TRIAD_HOST_DEVICE inline float rotary_fma(float a, float b, float c) { return fmaf(a, b, c); }
TRIAD_HOST_DEVICE inline double rotary_fma(double a, double b, double c) { return fma(a, b, c); }

// Features (x1, x2) = (x_i, x_{i+D/2}) with their tables' entries (c1, c2) and (s1, s2):
// forward  y1 = x1 c1 - x2 s1, y2 = x2 c2 + x1 s2   (x cos + rotate_half(x) sin);
// backward y1 = x1 c1 + x2 s2, y2 = x2 c2 - x1 s1   (g cos - rotate_half(g sin), x = g).
template <class T>
TRIAD_HOST_DEVICE inline void rotary_pair(T x1, T x2, T c1, T c2, T s1, T s2, bool backward, T& y1, T& y2) {
  if (backward) {
    y1 = rotary_fma(x1, c1, x2 * s2);
    y2 = rotary_fma(x2, c2, -(x1 * s1));
  } else {
    y1 = rotary_fma(x1, c1, -(x2 * s1));
    y2 = rotary_fma(x2, c2, x1 * s2);
  }
}

}  // namespace triad
