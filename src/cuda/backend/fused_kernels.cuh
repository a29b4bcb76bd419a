// The kernels of the CUDA backend's fused transformer-block ops (fused.cu launches them;
// tensor/cpu/ holds the CPU versions they follow): bias and GELU after a product whose
// epilogue cuBLASLt cannot take, GELU's backward with the bias gradient, SwiGLU's product
// and its backward, the rotary embedding and its backward, and the residual add fused into
// layer norm and RMS norm. They live in a header of their own so that
// tests/cuda/test_fused_kernels_emulated.cpp runs them on the CPU under an emulation of
// CUDA. Operands are f32, bf16 or f16 (Floats), computed on in f32; each result is rounded
// once as its dtype stores it.
#pragma once

#include <cstdint>

#include "cuda/backend/launch.cuh"
#include "cuda/backend/norm_rows.cuh"
#include "tensor/rotary_math.h"

namespace triad::cuda {

namespace {

// The activations as the CPU computes them (tensor/cpu/vec_math.h), in f32.
__device__ inline float fused_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ inline float fused_gelu_grad(float v, float g) {
  const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  const float t = tanhf(u);
  const float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * v * v);
  return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
}
__device__ inline float fused_sigmoid(float x) { return 0.5f * (1.0f + tanhf(0.5f * x)); }
__device__ inline float fused_silu(float x) { return x * fused_sigmoid(x); }
__device__ inline float fused_silu_grad(float x, float g) {
  const float s = fused_sigmoid(x);
  return g * (s * (1.0f + x * (1.0f - s)));
}

// v as f's dtype stores it, read back as f32.
__device__ inline float as_stored(const Floats& f, float v) {
  switch (f.dtype) {
    case DType::bf16:
      return bf16_to_float(float_to_bf16(v));
    case DType::f16:
      return f16_to_float(float_to_f16(v));
    default:
      return v;
  }
}

// ---- linear + GELU ----

// product (total = rows n) f32: pre = product + bias (bias.data null: none), out =
// GELU(product + bias) of the unrounded sum.
__global__ void bias_gelu_kernel(const float* product, Floats bias, Floats pre, Floats out, int64_t total, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const float s = bias.data ? product[t] + bias.load(t % n) : product[t];
    pre.store(t, s);
    out.store(t, fused_gelu(s));
  }
}

// grad_pre = GELU'(pre) g over rows [chunk len, (chunk + 1) len) of (rows, n), one column a
// thread; partial (chunks, n), when not null, receives the column sums of grad_pre as
// stored, in row order.
__global__ void gelu_bias_backward_kernel(Floats pre, Floats g, Floats grad_pre, float* partial, int64_t rows,
                                          int64_t n, int64_t len) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * len, end = begin + len < rows ? begin + len : rows;
  float s = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    const float v = as_stored(grad_pre, fused_gelu_grad(pre.load(r * n + j), g.load(r * n + j)));
    grad_pre.store(r * n + j, v);
    s += v;
  }
  if (partial) partial[chunk * n + j] = s;
}

// out (n) = the sums over chunks of partial (chunks, n), in chunk order.
__global__ void column_sum_kernel(const float* partial, Floats out, int64_t chunks, int64_t n) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * n + j];
  out.store(j, s);
}

// ---- SwiGLU ----

__global__ void swiglu_kernel(Floats a, Floats b, Floats out, int64_t total) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x)
    out.store(t, fused_silu(a.load(t)) * b.load(t));
}

__global__ void swiglu_backward_kernel(Floats a, Floats b, Floats g, Floats da, Floats db, int64_t total) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const float av = a.load(t), gv = g.load(t);
    da.store(t, fused_silu_grad(av, gv * b.load(t)));
    db.store(t, gv * fused_silu(av));
  }
}

// ---- rotary embedding ----

// x (B, n, T, D) of ops::rotary at its strides, in elements; the tables (B or 1, T, D),
// contiguous.
struct RotaryShape {
  int64_t n, T, D;
  int64_t stride[4];
  bool per_row;          // tables (B, T, D): each row's own positions
  int64_t out_stride[3];  // out's along B, n and T (stride 1 along D)
};

// out (B, n, T, D) at out_stride; a thread a feature pair (i, i + D/2) of row (b, head, t) at a
// time, total = B n T D/2 pairs, so neighbouring threads read neighbouring features.
// backward: x is the gradient (ops::rotary_backward). tensor/rotary_math.h's arithmetic.
// I, the pairs' index type: uint32_t below 2^31 pairs (the divisions that place a pair are
// then 32-bit ones, several times cheaper than 64-bit ones), else int64_t.
template <class I>
__global__ void rotary_kernel(Floats x, RotaryShape s, Floats cos, Floats sin, Floats out, I total, bool backward) {
  const I h = I(s.D / 2), n = I(s.n), T = I(s.T);
  for (I p = blockIdx.x * I(blockDim.x) + threadIdx.x; p < total; p += I(gridDim.x) * I(blockDim.x)) {
    const I r = p / h, i = p - r * h, bh = r / T, t = r - bh * T, b = bh / n, head = bh - b * n;
    const int64_t at = int64_t(b) * s.stride[0] + int64_t(head) * s.stride[1] + int64_t(t) * s.stride[2];
    const int64_t c = ((s.per_row ? int64_t(b) * s.T : 0) + t) * s.D + i;
    const int64_t y = int64_t(b) * s.out_stride[0] + int64_t(head) * s.out_stride[1] + int64_t(t) * s.out_stride[2] + i;
    float y1, y2;
    rotary_pair(x.load(at + i * s.stride[3]), x.load(at + (i + h) * s.stride[3]), cos.load(c), cos.load(c + h),
                sin.load(c), sin.load(c + h), backward, y1, y2);
    out.store(y, y1);
    out.store(y + h, y2);
  }
}

// ---- residual add + norm: one block a row, as layer_norm_kernel and rms_norm_kernel ----

// sum = x + r rounded to sum's dtype; y, mean, rstd: layer norm of the stored sum. Each
// thread reads back only what it wrote.
__global__ void add_layer_norm_kernel(Floats x, Floats r, Floats w, Floats b, float eps, Floats sum, Floats y,
                                      float* mean, float* rstd, int64_t c) {
  const int64_t i = blockIdx.x, row = i * c;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float v = as_stored(sum, x.load(row + j) + r.load(row + j));
    sum.store(row + j, v);
    s += v;
  }
  layer_norm_row(sum, w, b, eps, y, mean, rstd, i, c, s);
}

__global__ void add_rms_norm_kernel(Floats x, Floats r, Floats w, float eps, Floats sum, Floats y, float* rstd,
                                    int64_t c) {
  const int64_t i = blockIdx.x, row = i * c;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float v = as_stored(sum, x.load(row + j) + r.load(row + j));
    sum.store(row + j, v);
    ss += v * v;
  }
  rms_norm_row(sum, w, eps, y, rstd, i, c, ss);
}

}  // namespace

}  // namespace triad::cuda
