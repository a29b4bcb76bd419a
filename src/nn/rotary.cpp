#include "nn/rotary.h"

#include <cmath>

#include "autograd/functions.h"

namespace triad::nn {

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta)
    : head_dim_(head_dim), max_positions_(max_positions) {
  TRIAD_CHECK(head_dim > 0 && head_dim % 2 == 0, "RotaryEmbedding: the head dimension must be even, got " << head_dim);
  TRIAD_CHECK(max_positions > 0, "RotaryEmbedding: max_positions must be positive, got " << max_positions);
  TRIAD_CHECK(theta > 0.0, "RotaryEmbedding: theta must be positive, got " << theta);
  const int64_t half = head_dim / 2;
  std::vector<double> c(size_t(max_positions * head_dim)), s(c.size());
  for (int64_t p = 0; p < max_positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(theta, -double(2 * i) / double(head_dim));
      for (const int64_t j : {i, i + half}) {
        c[size_t(p * head_dim + j)] = std::cos(angle);
        s[size_t(p * head_dim + j)] = std::sin(angle);
      }
    }
  cos_ = Tensor::from_vector(c, {max_positions, head_dim});
  sin_ = Tensor::from_vector(s, {max_positions, head_dim});
}

const std::pair<Tensor, Tensor>& RotaryEmbedding::tables(DType activations, Device device) const {
  // 16-bit activations read the tables in f32 (Note [16-bit activations]).
  const DType dtype = activations == DType::f64 ? DType::f64 : DType::f32;
  const auto key = std::pair(int(dtype), device.str());
  auto it = copies_.find(key);
  if (it == copies_.end())
    it = copies_.emplace(key, std::pair(ops::to(ops::to(cos_, dtype), device), ops::to(ops::to(sin_, dtype), device)))
             .first;
  return it->second;
}

Tensor RotaryEmbedding::apply(const Tensor& x, int64_t pos) const {
  TRIAD_CHECK(x.dim() >= 2 && x.size(-1) == head_dim_,
              "RotaryEmbedding: expected x (..., T, " << head_dim_ << "), got " << shape_str(x.shape()));
  const int64_t T = x.size(-2);
  TRIAD_CHECK(pos >= 0 && pos + T <= max_positions_,
              "RotaryEmbedding: positions " << pos << ".." << pos + T << " exceed the " << max_positions_
                                            << " it has angles for");
  const auto& [c, s] = tables(x.dtype(), x.device());
  return rotary_embedding(x, ops::narrow(c, 0, pos, T), ops::narrow(s, 0, pos, T));
}

Tensor RotaryEmbedding::apply(const Tensor& x, const Tensor& positions) const {
  TRIAD_CHECK(x.dim() == 4 && x.size(-1) == head_dim_ && positions.dim() == 2 && positions.size(0) == x.size(0) &&
                  positions.size(1) == x.size(2),
              "RotaryEmbedding: expected x (B, n, T, " << head_dim_ << ") and positions (B, T), got "
                                                       << shape_str(x.shape()) << " and " << shape_str(positions.shape()));
  const auto& [c, s] = tables(x.dtype(), x.device());
  // (B, T, D) rows of the tables, one head axis to broadcast over.
  return rotary_embedding(x, ops::unsqueeze(ops::embedding(c, positions), 1),
                          ops::unsqueeze(ops::embedding(s, positions), 1));
}

}  // namespace triad::nn
