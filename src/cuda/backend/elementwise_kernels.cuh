// The elementwise kernels' templates (cuda/backend/elementwise.cu instantiates them per op
// with a functor) and the functors of the ops IEEE arithmetic rounds exactly: +, -, x, /,
// negation, square root and their scalar forms. Those also run on f64 operands (the
// scalars a step keeps on the device: its gradient norm, the loss scale), so that the device
// computes them as the CPU does, bit for bit; every other op takes f32, bf16 or f16. In a
// header of their own so that tests/cuda/test_elementwise_kernels_emulated.cpp runs them on
// the CPU under an emulation of CUDA.
#pragma once

#include <cstdint>

#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

// Operands stored in f32, bf16 or f16 (Floats), computed on in f32.
template <class F>
__global__ void map2_kernel(int64_t n, Strided<3> g, Floats out, Floats a, Floats b, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    g.offsets(i, off);
    out.store(off[0], f(a.load(off[1]), b.load(off[2])));
  }
}

template <class F>
__global__ void map1_kernel(int64_t n, Strided<2> g, Floats out, Floats a, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    g.offsets(i, off);
    out.store(off[0], f(a.load(off[1])));
  }
}

// f64 operands, computed on in f64: F is one of the exact functors below.
template <class F>
__global__ void map2_f64_kernel(int64_t n, Strided<3> g, double* out, const double* a, const double* b, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    g.offsets(i, off);
    out[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

template <class F>
__global__ void map1_f64_kernel(int64_t n, Strided<2> g, double* out, const double* a, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    g.offsets(i, off);
    out[off[0]] = f(a[off[1]]);
  }
}

// T: float or double. The scalar of Scale and AddScalar is the op's, rounded to T.
struct Add {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return x + y;
  }
};
struct Sub {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return x - y;
  }
};
struct Mul {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return x * y;
  }
};
struct Div {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return x / y;
  }
};
struct Neg {
  template <class T>
  __device__ T operator()(T x) const {
    return -x;
  }
};
struct Sqrt {
  __device__ float operator()(float x) const { return sqrtf(x); }
  __device__ double operator()(double x) const { return sqrt(x); }
};
template <class T>
struct Scale {
  T s;
  __device__ T operator()(T x) const { return x * s; }
};
template <class T>
struct AddScalar {
  T s;
  __device__ T operator()(T x) const { return x + s; }
};

}  // namespace

}  // namespace triad::cuda
