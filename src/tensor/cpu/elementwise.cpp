// Elementwise kernels: binary ops over broadcast operands, unary maps, axpy, GELU, SiLU,
// dropout. bf16/f16 operands go through f32 copies (tensor/cpu/widen.h).
#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/vec_math.h"
#include "tensor/cpu/visit_float.h"
#include "tensor/cpu/widen.h"
#include "tensor/random.h"

namespace triad {

namespace {

template <class T, class F>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, F&& f) {
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  if (cpu::dense_like(a, out) && cpu::dense_like(b, out)) {
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    return;
  }
  cpu::for_each_row<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()},
                       [&](const std::array<int64_t, 3>& base, int64_t len, const std::array<int64_t, 3>& st) {
                         for (int64_t i = 0; i < len; ++i)
                           po[base[0] + i * st[0]] = f(pa[base[1] + i * st[1]], pb[base[2] + i * st[2]]);
                       });
}

template <class T, class F>
void map1(const Tensor& a, const Tensor& out, F&& f) {
  const T* pa = static_cast<const T*>(a.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  if (cpu::dense_like(a, out)) {
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i]);
    return;
  }
  cpu::for_each_row<2>(out.shape(), {&out.strides(), &a.strides()},
                       [&](const std::array<int64_t, 2>& base, int64_t len, const std::array<int64_t, 2>& st) {
                         for (int64_t i = 0; i < len; ++i) po[base[0] + i * st[0]] = f(pa[base[1] + i * st[1]]);
                       });
}

template <class T>
constexpr T kGeluScale = T(0.7978845608028654);  // sqrt(2/pi)
template <class T>
constexpr T kGeluCubic = T(0.044715);

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (cpu::any_16bit({&a, &b, &out})) {
    const cpu::WideOut o(out);
    binary(op, cpu::widen(a), cpu::widen(b), o.get());
    return o.store();
  }
  cpu::visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::add:
        return map2<T>(a, b, out, [](T x, T y) { return x + y; });
      case BinaryOp::sub:
        return map2<T>(a, b, out, [](T x, T y) { return x - y; });
      case BinaryOp::mul:
        return map2<T>(a, b, out, [](T x, T y) { return x * y; });
      case BinaryOp::div:
        return map2<T>(a, b, out, [](T x, T y) { return x / y; });
      case BinaryOp::relu_backward:
        return map2<T>(a, b, out, [](T y, T g) { return y > T(0) ? g : T(0); });
      case BinaryOp::silu_backward:
        return map2<T>(a, b, out, [](T x, T g) {
          const T s = T(0.5) * (T(1) + cpu::vtanh(T(0.5) * x));  // sigmoid(x)
          return g * (s * (T(1) + x * (T(1) - s)));
        });
    }
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& a, const Tensor& out, double scalar) {
  if (cpu::any_16bit({&a, &out})) {
    const cpu::WideOut o(out);
    unary(op, cpu::widen(a), o.get(), scalar);
    return o.store();
  }
  cpu::visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T s = T(scalar);
    switch (op) {
      case UnaryOp::neg:
        return map1<T>(a, out, [](T x) { return -x; });
      case UnaryOp::exp:
        return map1<T>(a, out, [](T x) { return cpu::vexp(x); });
      case UnaryOp::log:
        return map1<T>(a, out, [](T x) { return std::log(x); });
      case UnaryOp::sqrt:
        return map1<T>(a, out, [](T x) { return std::sqrt(x); });
      case UnaryOp::tanh:
        return map1<T>(a, out, [](T x) { return cpu::vtanh(x); });
      case UnaryOp::relu:
        return map1<T>(a, out, [](T x) { return x > T(0) ? x : T(0); });
      case UnaryOp::pow:
        return map1<T>(a, out, [s](T x) { return std::pow(x, s); });
      case UnaryOp::scale:
        return map1<T>(a, out, [s](T x) { return x * s; });
      case UnaryOp::add_scalar:
        return map1<T>(a, out, [s](T x) { return x + s; });
      case UnaryOp::gelu:
        return map1<T>(a, out, [](T x) {
          return T(0.5) * x * (T(1) + cpu::vtanh(kGeluScale<T> * (x + kGeluCubic<T> * x * x * x)));
        });
      case UnaryOp::silu:
        return map1<T>(a, out, [](T x) { return x * (T(0.5) * (T(1) + cpu::vtanh(T(0.5) * x))); });
    }
  });
}

void CpuBackend::axpy(const Tensor& dst, const Tensor& src, double alpha) {
  if (cpu::any_16bit({&dst, &src})) {
    const cpu::WideOut d(dst, /*initial=*/true);
    axpy(d.get(), cpu::widen(src), alpha);
    return d.store();
  }
  cpu::visit_float(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T al = T(alpha);
    if (alpha == 1.0)
      map2<T>(dst, src, dst, [](T d, T s) { return d + s; });
    else
      map2<T>(dst, src, dst, [al](T d, T s) { return d + al * s; });
  });
}

void CpuBackend::gelu_backward(const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) {
  if (cpu::any_16bit({&x, &grad_y, &grad_x})) {
    const cpu::WideOut o(grad_x);
    gelu_backward(cpu::widen(x), cpu::widen(grad_y), o.get());
    return o.store();
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map2<T>(x, grad_y, grad_x, [](T v, T g) {
      const T u = kGeluScale<T> * (v + kGeluCubic<T> * v * v * v);
      const T t = cpu::vtanh(u);
      const T du = kGeluScale<T> * (T(1) + T(3) * kGeluCubic<T> * v * v);
      return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    });
  });
}

void CpuBackend::dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t first) {
  if (cpu::any_16bit({&x, &out})) {
    const cpu::WideOut o(out);
    dropout(cpu::widen(x), o.get(), p, seed, first);
    return o.store();
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const T keep_scale = T(1.0 / (1.0 - p));
    const int64_t n = x.numel();
#pragma omp parallel for if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = random_uniform(seed, first + uint64_t(i)) >= p ? px[i] * keep_scale : T(0);
  });
}

}  // namespace triad
