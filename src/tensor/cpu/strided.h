// Iteration over strided operands that share one shape: the work is cut into rows along
// the last dimension and rows are spread over OpenMP threads. The callback gets, per
// operand, the element offset of the row start and the stride along the row, so the inner
// loop is a plain strided loop the compiler can vectorize when the strides are 1.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

namespace triad::cpu {

// Elements below which a loop stays on one thread.
inline constexpr int64_t kParallelGrain = 1 << 15;

template <size_t N, class F>
void for_each_row(const Shape& shape, const std::array<const Shape*, N>& strides, F&& f) {
  const int nd = int(shape.size());
  const int64_t total = numel(shape);
  if (total == 0) return;
  const int64_t len = nd ? shape[nd - 1] : 1;
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k) inner[k] = nd ? (*strides[k])[nd - 1] : 0;
  const int64_t rows = total / len;
#pragma omp parallel for schedule(static) if (total > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    std::array<int64_t, N> base{};
    int64_t rem = r;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = rem % shape[d];
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) base[k] += i * (*strides[k])[d];
    }
    f(base, len, inner);
  }
}

inline bool dense_like(const Tensor& a, const Tensor& b) {
  return a.is_contiguous() && b.is_contiguous() && a.shape() == b.shape();
}

}  // namespace triad::cpu
