// Elementwise kernels: binary ops over broadcast operands, unary maps, axpy, GELU and its
// backward, SiLU and its backward, dropout (tensor/cpu/elementwise.cpp on the GPU). One
// kernel template per operand count (cuda/backend/elementwise_kernels.cuh), instantiated
// per op with a functor; operands of any strides go through Strided, which merges a dense
// operand's dimensions into one; each operand is stored in f32, bf16 or f16 of its own
// (Floats), computed on in f32. The exactly rounded ops (+, -, x, /, negation, square root,
// the scalar forms) also take f64 operands, computed on in f64.
#include "cuda/backend/convert.cuh"
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/elementwise_kernels.cuh"
#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

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

double* doubles(const Tensor& t, const char* method) {
  TRIAD_CHECK(t.dtype() == DType::f64,
              "cuda backend: " << method << " on f64 takes f64 operands only, got " << t.str());
  return static_cast<double*>(t.raw_data());
}

template <class F>
void map2_f64(const Tensor& a, const Tensor& b, const Tensor& out, F f, const char* method) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OnDevice on(out);
  const Strided<3> g = make_strided<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()}, method);
  map2_f64_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, g, doubles(out, method), doubles(a, method),
                                                               doubles(b, method), f);
  TRIAD_CUDA_CHECK_LAUNCH();
}

template <class F>
void map1_f64(const Tensor& a, const Tensor& out, F f, const char* method) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OnDevice on(out);
  const Strided<2> g = make_strided<2>(out.shape(), {&out.strides(), &a.strides()}, method);
  map1_f64_kernel<<<blocks_for(n), kThreads, 0, on.stream()>>>(n, g, doubles(out, method), doubles(a, method), f);
  TRIAD_CUDA_CHECK_LAUNCH();
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

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

struct Exp {
  __device__ float operator()(float x) const { return expf(x); }
};
struct Log {
  __device__ float operator()(float x) const { return logf(x); }
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

__global__ void dropout_kernel(int64_t n, Floats x, Floats out, double p, float keep_scale, uint64_t seed,
                               uint64_t first) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out.store(i, random_uniform(seed, first + uint64_t(i)) >= p ? x.load(i) * keep_scale : 0.0f);
}

// f64 operands: the exactly rounded ops run (true); the others are f32, bf16 and f16 only
// (false: floats() names the dtype).
bool binary_f64(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::add:
      return map2_f64(a, b, out, Add{}, "add"), true;
    case BinaryOp::sub:
      return map2_f64(a, b, out, Sub{}, "sub"), true;
    case BinaryOp::mul:
      return map2_f64(a, b, out, Mul{}, "mul"), true;
    case BinaryOp::div:
      return map2_f64(a, b, out, Div{}, "div"), true;
    default:
      return false;
  }
}

bool unary_f64(UnaryOp op, const Tensor& a, const Tensor& out, double scalar) {
  switch (op) {
    case UnaryOp::neg:
      return map1_f64(a, out, Neg{}, "neg"), true;
    case UnaryOp::sqrt:
      return map1_f64(a, out, Sqrt{}, "sqrt"), true;
    case UnaryOp::scale:
      return map1_f64(a, out, Scale<double>{scalar}, "scale"), true;
    case UnaryOp::add_scalar:
      return map1_f64(a, out, AddScalar<double>{scalar}, "add_scalar"), true;
    default:
      return false;
  }
}

}  // namespace

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if ((a.dtype() == DType::f64 || b.dtype() == DType::f64 || out.dtype() == DType::f64) && binary_f64(op, a, b, out))
    return;
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
  if ((a.dtype() == DType::f64 || out.dtype() == DType::f64) && unary_f64(op, a, out, scalar)) return;
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
      return map1(a, out, Scale<float>{s}, "scale");
    case UnaryOp::add_scalar:
      return map1(a, out, AddScalar<float>{s}, "add_scalar");
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
