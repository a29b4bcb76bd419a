#include "nn/language_model.h"

#include <algorithm>

#include "tensor/ops.h"

namespace triad::nn {

LeftPadding left_padding(const std::vector<int64_t>& pads, int64_t T, Device device) {
  TRIAD_CHECK(!pads.empty() && T > 0, "left_padding: expected at least one row and one column, got "
                                          << pads.size() << " rows of " << T);
  std::vector<int64_t> positions(pads.size() * size_t(T));
  for (size_t b = 0; b < pads.size(); ++b) {
    TRIAD_CHECK(pads[b] >= 0 && pads[b] < T,
                "left_padding: row " << b << " has " << pads[b] << " pads, expected 0 to " << T - 1);
    for (int64_t j = 0; j < T; ++j) positions[b * size_t(T) + size_t(j)] = std::max<int64_t>(j - pads[b], 0);
  }
  const int64_t B = int64_t(pads.size());
  return {ops::to(Tensor::from_vector(positions, {B, T}), device), ops::to(Tensor::from_vector(pads, {B}), device)};
}

void check_positions(const Tensor& p, const Tensor& indices, int64_t max_position, const char* who) {
  TRIAD_CHECK(p.defined() && p.dtype() == DType::i64 && p.shape() == indices.shape() && p.device() == indices.device(),
              who << ": positions must be i64 " << shape_str(indices.shape()) << " on " << indices.device().str()
                  << " as the indices, got " << (p.defined() ? p.str() : "none"));
  if (p.device().is_cpu() && p.numel() > 0) {  // on a device the embedding kernels check the range
    const Tensor pc = ops::contiguous(p);
    const auto [lo, hi] = std::minmax_element(pc.data<int64_t>(), pc.data<int64_t>() + pc.numel());
    TRIAD_CHECK(*lo >= 0 && *hi < max_position,
                who << ": positions must lie in [0, " << max_position << "), got " << *lo << ".." << *hi);
  }
}

void check_key_start(const Tensor& ks, const Tensor& indices, const char* who) {
  TRIAD_CHECK(ks.defined() && ks.dtype() == DType::i64 && ks.shape() == Shape{indices.size(0)} &&
                  ks.device() == indices.device(),
              who << ": key_start must be i64 (" << indices.size(0) << ",) on " << indices.device().str() << ", got "
                  << (ks.defined() ? ks.str() : "none"));
}

void check_padding(const LeftPadding& padding, const Tensor& indices, int64_t max_position, const char* who) {
  check_positions(padding.positions, indices, max_position, who);
  check_key_start(padding.key_start, indices, who);
}

}  // namespace triad::nn
