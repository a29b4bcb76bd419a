// Copies with dtype conversion, copies at a position on the device and counters
// (Note [Positions on the device] in tensor/ops.h), fills, and random fills.
#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace triad {

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.raw_data());
      const S* s = static_cast<const S*>(src.raw_data());
      auto convert = [](S v) {
        if constexpr (std::is_same_v<D, S>)
          return v;
        else
          return from_double<D>(to_double(v));
      };
      if (cpu::dense_like(dst, src)) {
        const int64_t n = dst.numel();
#pragma omp parallel for simd if (n > cpu::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) d[i] = convert(s[i]);
        return;
      }
      cpu::for_each_row<2>(dst.shape(), {&dst.strides(), &src.strides()},
                           [&](const std::array<int64_t, 2>& base, int64_t len, const std::array<int64_t, 2>& st) {
                             for (int64_t i = 0; i < len; ++i) d[base[0] + i * st[0]] = convert(s[base[1] + i * st[1]]);
                           });
    });
  });
}

void CpuBackend::copy_at(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t i = index.data<int64_t>()[0], last = dst.size(dim) - src.size(dim);
  TRIAD_CHECK(i >= 0 && i <= last, "copy_at_: index " << i << " outside [0, " << last << "] (" << src.size(dim)
                                                      << " of " << dst.size(dim) << " along dimension " << dim << ")");
  copy(ops::narrow(dst, dim, i, src.size(dim)), src);
}

void CpuBackend::increment(const Tensor& dst, int64_t value) {
  int64_t* d = dst.data<int64_t>();
  for (int64_t i = 0; i < dst.numel(); ++i) d[i] += value;
}

void CpuBackend::fill(const Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = from_double<T>(value);
    T* d = static_cast<T*>(dst.raw_data());
    cpu::for_each_row<1>(dst.shape(), {&dst.strides()},
                         [&](const std::array<int64_t, 1>& base, int64_t len, const std::array<int64_t, 1>& st) {
                           for (int64_t i = 0; i < len; ++i) d[base[0] + i * st[0]] = v;
                         });
  });
}

namespace {

template <class F>
void fill_random(const Tensor& dst, F&& value_at) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      T* d = static_cast<T*>(dst.raw_data());
      const int64_t n = dst.numel();
#pragma omp parallel for if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) d[i] = from_double<T>(value_at(i));
    }
  });
}

}  // namespace

void CpuBackend::normal(const Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t first) {
  // Box-Muller over counter pairs: element 2j and 2j+1 share the uniforms of pair j.
  fill_random(dst, [&](int64_t i) {
    const uint64_t pair = first + uint64_t(i & ~int64_t(1));
    const double u1 = 1.0 - random_uniform(seed, pair), u2 = random_uniform(seed, pair + 1);
    const double r = std::sqrt(-2.0 * std::log(u1)), theta = 2.0 * M_PI * u2;
    return mean + stddev * r * ((i & 1) ? std::sin(theta) : std::cos(theta));
  });
}

void CpuBackend::uniform(const Tensor& dst, double low, double high, uint64_t seed, uint64_t first) {
  fill_random(dst, [&](int64_t i) { return low + (high - low) * random_uniform(seed, first + uint64_t(i)); });
}

Backend& cpu_backend() {
  static CpuBackend b;
  return b;
}

}  // namespace triad
