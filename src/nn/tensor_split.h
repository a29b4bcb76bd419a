// TensorSplit: how a parameter is divided over the ranks of a tensor-parallel group, recorded
// on the parameter by the layer that owns it (Module::register_parameter), so that ZeRO,
// gradient clipping and checkpoints handle any tensor-parallel layer with no model-specific
// code (DESIGN.md, the three axes).
//
// A split parameter's dimension `dim` has, on every rank, `local` = its local extent; the
// global tensor's dimension is `parts` blocks of global_size / parts each (one block for a
// plain split; three for a fused q|k|v projection, each of q, k and v split over the
// ranks), and rank r holds indices [r·l, (r+1)·l) of every block, l = local / parts. A block
// may be shorter than ranks·l: the indices past it are padding, which the rank holds but
// which belong to no global element (a vocabulary padded to a multiple of the ranks).
//
// A replicated parameter (dim -1) is the same on every rank. partial_grad marks one whose
// gradient each rank computes from its own part of the tokens (sequence parallelism): the
// ranks' gradients are summed before the optimizer reads them.
//
// expert marks a parameter of an MoE layer's experts (nn/moe_experts.h): under expert
// parallelism only the ranks of an expert-data-parallel group hold it (Note [Expert
// parallelism]), so ZeRO reduces and partitions it over that group rather than over dp.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace triad::nn {

struct TensorSplit {
  int dim = -1;  // -1: replicated
  int ranks = 1, rank = 0;
  int parts = 1;
  int64_t global_size = 0;  // of dim, over all parts; 0 for a replicated parameter
  bool partial_grad = false;
  bool expert = false;

  bool is_split() const { return dim >= 0; }
  // The global shape of a tensor whose local shape is `local`.
  Shape global_shape(const Shape& local) const;
  // For each local index along dim, its global index, or -1 for padding.
  std::vector<int64_t> global_indices(int64_t local_extent) const;
};

// A tensor-parallel split of a tensor of local shape `local` along dim (parts blocks), for
// rank `rank` of `ranks`, whose global extent along dim is global_size (0: local · ranks).
TensorSplit split_along(int dim, int ranks, int rank, int64_t global_size, int parts = 1);

// The vocabulary rows every rank of a tensor-parallel group holds for `vocab` tokens over
// `ranks` ranks: vocab padded up to a multiple of ranks · pad_multiple (Megatron's
// make-vocab-size-divisible-by), divided by ranks.
int64_t vocab_rows_per_rank(int64_t vocab, int ranks, int64_t pad_multiple = 64);

// This rank's part of `global` (its local tensor, contiguous, padding rows zero).
Tensor local_part(const Tensor& global, const TensorSplit& split, const Shape& local_shape);
// Writes `local` into its place in `global` (padding skipped).
void place_local_part(const Tensor& global, const Tensor& local, const TensorSplit& split);

}  // namespace triad::nn
