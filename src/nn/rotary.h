// Rotary position embedding (RoFormer, Su et al. 2021) in the rotate_half layout of GPT-NeoX
// and Hugging Face's Llama: feature pair (i, i + D/2) of a head of D features at position p
// turns by the angle p·θ^(-2i/D), i < D/2. Queries and keys so rotated make q·k depend on
// the positions only through their difference. Weights exported from Hugging Face's Llama
// use this layout, so their q and k projections load with no permutation.
#pragma once

#include <map>
#include <utility>

#include "tensor/tensor.h"

namespace triad::nn {

class RotaryEmbedding {
 public:
  // Angles for positions [0, max_positions), computed in double.
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta = 10000.0);

  // x (..., T, D) at positions pos..pos+T-1 -> x rotated (differentiable in x:
  // triad::rotary_embedding).
  Tensor apply(const Tensor& x, int64_t pos = 0) const;
  // x (B, n, T, D) with each row's own positions (B, T) i64 (Note [Left-padded batches] in
  // nn/language_model.h): token t of row b turns by positions[b][t]'s angles.
  Tensor apply(const Tensor& x, const Tensor& positions) const;

  int64_t head_dim() const { return head_dim_; }
  int64_t max_positions() const { return max_positions_; }

 private:
  // cos and sin (max_positions, D), each half the same, for activations of dtype
  // `activations` on `device`: in f64 for f64, else f32; made once per (dtype, device).
  const std::pair<Tensor, Tensor>& tables(DType activations, Device device) const;

  int64_t head_dim_, max_positions_;
  Tensor cos_, sin_;  // f64, on the host
  mutable std::map<std::pair<int, std::string>, std::pair<Tensor, Tensor>> copies_;
};

}  // namespace triad::nn
