// Elementwise kernels: binary ops over broadcast operands, unary maps, axpy, GELU (with the
// fused bias gradient), SiLU, SwiGLU's product, the rotary embedding, dropout. bf16/f16
// operands go through f32 copies (tensor/cpu/widen.h).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/vec_math.h"
#include "tensor/cpu/visit_float.h"
#include "tensor/cpu/widen.h"
#include "tensor/float16.h"
#include "tensor/random.h"
#include "tensor/rotary_math.h"

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
        return map2<T>(a, b, out, [](T x, T g) { return cpu::silu_grad(x, g); });
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
        return map1<T>(a, out, [](T x) { return cpu::gelu(x); });
      case UnaryOp::silu:
        return map1<T>(a, out, [](T x) { return cpu::silu(x); });
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
    map2<T>(x, grad_y, grad_x, [](T v, T g) { return cpu::gelu_grad(v, g); });
  });
}

namespace {

// v as a `stored` value reads back (the rounding a 16-bit result gets), in f32.
float as_stored(float v, DType stored) {
  if (stored == DType::bf16) return bf16_to_float(float_to_bf16(v));
  if (stored == DType::f16) return f16_to_float(float_to_f16(v));
  return v;
}

}  // namespace

// One pass: each thread owns a band of columns and walks every row, so each bias sum runs
// over the rows in order (sum_dim's order) without partials.
void CpuBackend::gelu_bias_backward(const Tensor& pre, const Tensor& grad_y, const Tensor& grad_pre,
                                    const Tensor& grad_bias) {
  if (cpu::any_16bit({&pre, &grad_y, &grad_pre, &grad_bias})) {
    const cpu::WideOut og(grad_pre), ob(grad_bias);
    const DType stored = grad_pre.dtype();
    const Tensor p = cpu::widen(pre), g = cpu::widen(grad_y);
    const int64_t n = pre.size(-1), rows = n ? pre.numel() / n : 0;
    const float* pp = p.data<float>();
    const float* pg = g.data<float>();
    float* pd = og.get().data<float>();
    float* pb = grad_bias.defined() ? ob.get().data<float>() : nullptr;
#pragma omp parallel if (rows * n > cpu::kParallelGrain)
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
      if (pb) std::fill(pb + lo, pb + hi, 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = lo; j < hi; ++j) {
          const float v = as_stored(cpu::gelu_grad(pp[r * n + j], pg[r * n + j]), stored);
          pd[r * n + j] = v;
          if (pb) pb[j] += v;
        }
    }
    og.store();
    return ob.store();
  }
  cpu::visit_float(pre.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = pre.size(-1), rows = n ? pre.numel() / n : 0;
    const T* pp = pre.data<T>();
    const T* pg = grad_y.data<T>();
    T* pd = grad_pre.data<T>();
    T* pb = grad_bias.defined() ? grad_bias.data<T>() : nullptr;
#pragma omp parallel if (rows * n > cpu::kParallelGrain)
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
      if (pb) {
        std::fill(pb + lo, pb + hi, T(0));
        for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
          for (int64_t j = lo; j < hi; ++j) {
            const T v = cpu::gelu_grad(pp[r * n + j], pg[r * n + j]);
            pd[r * n + j] = v;
            pb[j] += v;
          }
        }
      } else {
        for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
          for (int64_t j = lo; j < hi; ++j) pd[r * n + j] = cpu::gelu_grad(pp[r * n + j], pg[r * n + j]);
        }
      }
    }
  });
}

void CpuBackend::swiglu(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (cpu::any_16bit({&a, &b, &out})) {
    const cpu::WideOut o(out);
    swiglu(cpu::widen(a), cpu::widen(b), o.get());
    return o.store();
  }
  cpu::visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map2<T>(a, b, out, [](T x, T y) { return cpu::silu(x) * y; });
  });
}

void CpuBackend::swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& grad_y, const Tensor& da,
                                 const Tensor& db) {
  if (cpu::any_16bit({&a, &b, &grad_y, &da, &db})) {
    const cpu::WideOut oa(da), ob(db);
    swiglu_backward(cpu::widen(a), cpu::widen(b), cpu::widen(grad_y), oa.get(), ob.get());
    oa.store();
    return ob.store();
  }
  cpu::visit_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = a.numel();
    const T *pa = a.data<T>(), *pb = b.data<T>(), *pg = grad_y.data<T>();
    T *pda = da.data<T>(), *pdb = db.data<T>();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      pda[i] = cpu::silu_grad(pa[i], pg[i] * pb[i]);
      pdb[i] = pg[i] * cpu::silu(pa[i]);
    }
  });
}

// One row of D features a loop iteration: x read through its strides, out contiguous.
void CpuBackend::rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out, bool backward) {
  if (cpu::any_16bit({&x, &cos, &sin, &out})) {
    const cpu::WideOut o(out);
    rotary(cpu::widen(x), cpu::widen(cos), cpu::widen(sin), o.get(), backward);
    return o.store();
  }
  cpu::visit_float(out.dtype(), [&](auto tag) {
    using F = decltype(tag);
    const int64_t n = x.size(1), T = x.size(2), D = x.size(3), h = D / 2, rows = x.numel() / std::max<int64_t>(D, 1);
    const bool per_row = cos.size(0) > 1;
    const int64_t sb = x.stride(0), sn = x.stride(1), st = x.stride(2), sd = x.stride(3);
    const int64_t ob = out.stride(0), on = out.stride(1), ot = out.stride(2);
    const F* px = x.data<F>();
    const F *pc = cos.data<F>(), *ps = sin.data<F>();
    F* po = out.data<F>();
    // Rows in x's memory order: heads inner when they are adjacent in x (a view of a
    // (B, T, n, D) projection), else positions.
    const bool heads_inner = sn < st;
#pragma omp parallel for if (x.numel() > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / (n * T), q = r % (n * T);
      const int64_t head = heads_inner ? q % n : q / T, t = heads_inner ? q / n : q % T;
      const F* xr = px + b * sb + head * sn + t * st;
      const F* c = pc + ((per_row ? b * T : 0) + t) * D;
      const F* s = ps + ((per_row ? b * T : 0) + t) * D;
      F* y = po + b * ob + head * on + t * ot;
      if (sd == 1) {  // the common case, vectorized with plain loads
#pragma omp simd
        for (int64_t i = 0; i < h; ++i)
          rotary_pair(xr[i], xr[i + h], c[i], c[i + h], s[i], s[i + h], backward, y[i], y[i + h]);
      } else {
        for (int64_t i = 0; i < h; ++i)
          rotary_pair(xr[i * sd], xr[(i + h) * sd], c[i], c[i + h], s[i], s[i + h], backward, y[i], y[i + h]);
      }
    }
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
