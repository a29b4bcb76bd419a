// exp and tanh the compiler can vectorize. glibc's scalar expf/tanhf are calls the
// vectorizer cannot widen (its vector variants are only declared under -ffast-math), and
// softmax, cross-entropy and GELU spend most of their time in them. These are branch-free
// inline versions for float, accurate to a few ulp; double keeps the C library (it only
// serves gradient checks). The activations built on them follow.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace triad::cpu {

// e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (relative
// error below 1.5e-7 on that interval), 2^n placed in the exponent bits. Inputs are clamped
// to [-87.3, 88.3], where 2^n stays a normal float.
inline float vexp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);  // not fmin/fmax: those stay calls
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = std::fma(n, -1.428606765330187e-6f, std::fma(n, -0.693145751953125f, x));
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// tanh(x) = sign(x) (1 - e^{-2|x|}) / (1 + e^{-2|x|}); absolute error below 2e-7.
inline float vtanh(float x) {
  const float t = vexp(-2.0f * std::fabs(x));
  return std::copysign((1.0f - t) / (1.0f + t), x);
}

inline double vexp(double x) { return std::exp(x); }
inline double vtanh(double x) { return std::tanh(x); }

// The activations on them, one expression each for every kernel that computes them (the
// fused kernels give the unfused ones' bits): GELU (tanh form), its derivative times g,
// sigmoid as (1 + tanh(x/2)) / 2 (finite for every x), SiLU and its derivative times g.
template <class T>
inline T gelu(T x) {
  return T(0.5) * x * (T(1) + vtanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
}
template <class T>
inline T gelu_grad(T v, T g) {
  const T u = T(0.7978845608028654) * (v + T(0.044715) * v * v * v);
  const T t = vtanh(u);
  const T du = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * v * v);
  return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
}
template <class T>
inline T sigmoid(T x) {
  return T(0.5) * (T(1) + vtanh(T(0.5) * x));
}
template <class T>
inline T silu(T x) {
  return x * sigmoid(x);
}
template <class T>
inline T silu_grad(T x, T g) {
  const T s = sigmoid(x);
  return g * (s * (T(1) + x * (T(1) - s)));
}

}  // namespace triad::cpu
