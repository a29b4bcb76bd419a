// Reductions. Sums over a dimension accumulate in the compute type along contiguous inner
// runs; whole-tensor reductions accumulate in double so gradient norms and losses do not
// depend on the thread count beyond the last bits. bf16/f16 operands go through f32 copies
// (tensor/cpu/widen.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/visit_float.h"
#include "tensor/cpu/widen.h"

namespace triad {

namespace {

template <class T, class Init, class Acc>
void reduce_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner, Init init, Acc acc) {
  const T* pa = a.data<T>();
  T* po = out.data<T>();
  if (inner == 1) {
#pragma omp parallel for if (outer * n > cpu::kParallelGrain)
    for (int64_t o = 0; o < outer; ++o) {
      T r = init;
      const T* row = pa + o * n;
      for (int64_t j = 0; j < n; ++j) r = acc(r, row[j]);
      po[o] = r;
    }
    return;
  }
#pragma omp parallel for if (outer * n * inner > cpu::kParallelGrain)
  for (int64_t o = 0; o < outer; ++o) {
    T* dst = po + o * inner;
    std::fill(dst, dst + inner, init);
    for (int64_t j = 0; j < n; ++j) {
      const T* src = pa + (o * n + j) * inner;
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) dst[i] = acc(dst[i], src[i]);
    }
  }
}

template <class T, class F>
double reduce_all(const Tensor& a, F&& f) {
  const T* p = a.data<T>();
  const int64_t n = a.numel();
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (n > cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) total += f(double(p[i]));
  return total;
}

}  // namespace

void CpuBackend::sum_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) {
  if (cpu::any_16bit({&a, &out})) {
    const cpu::WideOut o(out);
    sum_dim(cpu::widen(a), o.get(), outer, n, inner);
    return o.store();
  }
  cpu::visit_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    reduce_dim<T>(a, out, outer, n, inner, T(0), [](T r, T v) { return r + v; });
  });
}

void CpuBackend::max_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) {
  if (cpu::any_16bit({&a, &out})) {
    const cpu::WideOut o(out);
    max_dim(cpu::widen(a), o.get(), outer, n, inner);
    return o.store();
  }
  cpu::visit_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    reduce_dim<T>(a, out, outer, n, inner, -std::numeric_limits<T>::infinity(),
                  [](T r, T v) { return v > r || std::isnan(v) ? v : r; });
  });
}

void CpuBackend::sum_all_to(const Tensor& a, const Tensor& out) {
  const Tensor wide = cpu::widen(a);
  double r = 0;
  cpu::visit_float(wide.dtype(), [&](auto tag) { r = reduce_all<decltype(tag)>(wide, [](double v) { return v; }); });
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    *static_cast<T*>(out.raw_data()) = from_double<T>(r);
  });
}

double CpuBackend::sum_squares(const std::vector<Tensor>& tensors) {
  double r = 0;  // tensor by tensor, in order
  for (const Tensor& t : tensors) {
    const Tensor a = cpu::widen(t);
    cpu::visit_float(a.dtype(), [&](auto tag) { r += reduce_all<decltype(tag)>(a, [](double v) { return v * v; }); });
  }
  return r;
}

double CpuBackend::max_abs(const Tensor& a) {
  if (cpu::is_16bit(a)) return max_abs(cpu::widen(a));
  double r = 0;
  cpu::visit_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.data<T>();
    const int64_t n = a.numel();
    double m = 0;
#pragma omp parallel for reduction(max : m) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(p[i])));
    r = m;
  });
  return r;
}

bool CpuBackend::all_finite(const Tensor& a) {
  if (cpu::is_16bit(a)) return all_finite(cpu::widen(a));
  // A NaN or inf anywhere makes the sum of x*0 NaN; one pass, no branches.
  double r = 0;
  cpu::visit_float(a.dtype(), [&](auto tag) { r = reduce_all<decltype(tag)>(a, [](double v) { return v * 0.0; }); });
  return r == 0.0;
}

}  // namespace triad
