// Elementwise kernels: binary ops over broadcast operands, unary maps, axpy, GELU and its
// backward, SiLU and its backward, dropout (tensor/cpu/elementwise.cpp on the GPU). One
// kernel template per operand count, instantiated per op with a functor; operands of any
// strides go through Strided, which merges a dense operand's dimensions into one; each
// operand is stored in f32, bf16 or f16 of its own (Floats), computed on in f32.
#include "cuda/backend/convert.cuh"
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

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

template <class F>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, F f, const char* method) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OnDevice on(out);
  const Strided<3> g = make_strided<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()}, method);
  map2_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, g, floats(out, method), floats(a, method),
                                                           floats(b, method), f);
  TRIAD_CUDA_CHECK_LAUNCH();
}

template <class F>
void map1(const Tensor& a, const Tensor& out, F f, const char* method) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OnDevice on(out);
  const Strided<2> g = make_strided<2>(out.shape(), {&out.strides(), &a.strides()}, method);
  map1_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, g, floats(out, method), floats(a, method), f);
  TRIAD_CUDA_CHECK_LAUNCH();
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

struct Add {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct Sub {
  __device__ float operator()(float x, float y) const { return x - y; }
};
struct Mul {
  __device__ float operator()(float x, float y) const { return x * y; }
};
struct Div {
  __device__ float operator()(float x, float y) const { return x / y; }
};
struct ReluBackward {  // y, grad_y
  __device__ float operator()(float y, float g) const { return y > 0.0f ? g : 0.0f; }
};
struct Axpy {
  float alpha;
  __device__ float operator()(float d, float s) const { return d + alpha * s; }
};
// sigmoid(x) as the CPU computes it: (1 + tanh(x/2)) / 2.
__device__ inline float sigmoid(float x) { return 0.5f * (1.0f + tanhf(0.5f * x)); }
struct SiluBackward {  // x, grad_y
  __device__ float operator()(float x, float g) const {
    const float s = sigmoid(x);
    return g * (s * (1.0f + x * (1.0f - s)));
  }
};
struct GeluBackward {  // x, grad_y
  __device__ float operator()(float v, float g) const {
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    const float t = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
};

struct Neg {
  __device__ float operator()(float x) const { return -x; }
};
struct Exp {
  __device__ float operator()(float x) const { return expf(x); }
};
struct Log {
  __device__ float operator()(float x) const { return logf(x); }
};
struct Sqrt {
  __device__ float operator()(float x) const { return sqrtf(x); }
};
struct Tanh {
  __device__ float operator()(float x) const { return tanhf(x); }
};
struct Relu {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct Gelu {
  __device__ float operator()(float x) const {
    return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
};
struct Silu {
  __device__ float operator()(float x) const { return x * sigmoid(x); }
};
struct Pow {
  float s;
  __device__ float operator()(float x) const { return powf(x, s); }
};
struct Scale {
  float s;
  __device__ float operator()(float x) const { return x * s; }
};
struct AddScalar {
  float s;
  __device__ float operator()(float x) const { return x + s; }
};

__global__ void dropout_kernel(int64_t n, Floats x, Floats out, double p, float keep_scale, uint64_t seed,
                               uint64_t first) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out.store(i, random_uniform(seed, first + uint64_t(i)) >= p ? x.load(i) * keep_scale : 0.0f);
}

}  // namespace

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::add:
      return map2(a, b, out, Add{}, "add");
    case BinaryOp::sub:
      return map2(a, b, out, Sub{}, "sub");
    case BinaryOp::mul:
      return map2(a, b, out, Mul{}, "mul");
    case BinaryOp::div:
      return map2(a, b, out, Div{}, "div");
    case BinaryOp::relu_backward:
      return map2(a, b, out, ReluBackward{}, "relu_backward");
    case BinaryOp::silu_backward:
      return map2(a, b, out, SiluBackward{}, "silu_backward");
  }
}

void CudaBackend::unary(UnaryOp op, const Tensor& a, const Tensor& out, double scalar) {
  const float s = float(scalar);
  switch (op) {
    case UnaryOp::neg:
      return map1(a, out, Neg{}, "neg");
    case UnaryOp::exp:
      return map1(a, out, Exp{}, "exp");
    case UnaryOp::log:
      return map1(a, out, Log{}, "log");
    case UnaryOp::sqrt:
      return map1(a, out, Sqrt{}, "sqrt");
    case UnaryOp::tanh:
      return map1(a, out, Tanh{}, "tanh");
    case UnaryOp::relu:
      return map1(a, out, Relu{}, "relu");
    case UnaryOp::gelu:
      return map1(a, out, Gelu{}, "gelu");
    case UnaryOp::silu:
      return map1(a, out, Silu{}, "silu");
    case UnaryOp::pow:
      return map1(a, out, Pow{s}, "pow");
    case UnaryOp::scale:
      return map1(a, out, Scale{s}, "scale");
    case UnaryOp::add_scalar:
      return map1(a, out, AddScalar{s}, "add_scalar");
  }
}

void CudaBackend::axpy(const Tensor& dst, const Tensor& src, double alpha) {
  if (alpha == 1.0)
    map2(dst, src, dst, Add{}, "axpy");
  else
    map2(dst, src, dst, Axpy{float(alpha)}, "axpy");
}

void CudaBackend::gelu_backward(const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) {
  map2(x, grad_y, grad_x, GeluBackward{}, "gelu_backward");
}

void CudaBackend::dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t first) {
  const int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(x);
  const float keep_scale = float(1.0 / (1.0 - p));
  dropout_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, floats(x, "dropout"), floats(out, "dropout"), p,
                                                              keep_scale, seed, first);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
