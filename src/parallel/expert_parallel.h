// Expert parallelism (DeepSpeed-MoE's ep): the ExpertExchange of Note [Expert parallelism]
// (nn/expert_exchange.h) over an expert-parallel group, ProcessGrid::ep(). Rank r of the
// group holds the experts [r E/ep, (r+1) E/ep) of every MoE layer built with it; the ranks
// of an expert-data-parallel group, ProcessGrid::edp(), hold the same experts and sum their
// gradients (ZeRO does, given that group: Note [ZeRO with experts] in zero/expert_placement.h).
//
// When dropping, the exchange is two all-to-alls. With n = ep, block q of a rank's slots
// (E, C, d), the E/n experts of rank q, goes to rank q:
//   to_experts    (E, C, d) -> all-to-all -> (n, E/n, C, d) -> (E/n, n C, d)
//   from_experts  (E/n, n C, d) -> (n, E/n, C, d) -> all-to-all -> (E, C, d)
// each reordering one gather of rows (ep_ops::transpose_blocks), as dropless.
// so an expert's rows on its rank are the C slots of rank 0, then rank 1's, and so on, and
// from_experts undoes to_experts exactly. Dropless (Note [Dropless exchange]), an all-to-all
// of the per-expert counts, then variable-size all-to-alls of exactly the routed rows:
//   count_rows    sent (E) -> all-to-all of E/n counts per rank -> received (n, E/n)
//   to_experts    rows grouped by expert -> all_to_allv -> blocks (q, e) -> blocks (e, q)
//   from_experts  blocks (e, q) -> blocks (q, e) -> all_to_allv -> rows grouped by expert
// An all-to-all moves each element to one place, so its adjoint is the inverse move: each
// function's backward is the other's forward. Every rank of the group must call them in
// the same order (dropless: count_rows, then the exchanges with its counts).
#pragma once

#include "nn/expert_exchange.h"
#include "parallel/communicator.h"

namespace triad::parallel {

class ExpertParallel : public nn::ExpertExchange {
 public:
  explicit ExpertParallel(CommunicatorPtr ep);

  int ranks() const override { return ep_->size(); }
  int rank() const override { return ep_->rank(); }
  Tensor to_experts(const Tensor& slots) const override;
  Tensor from_experts(const Tensor& outputs) const override;
  nn::ExpertRows count_rows(const std::vector<int64_t>& sent, Device device) const override;
  Tensor to_experts(const Tensor& rows, const nn::ExpertRows& counts) const override;
  Tensor from_experts(const Tensor& outputs, const nn::ExpertRows& counts) const override;

 private:
  CommunicatorPtr ep_;
};

// The raw exchanges (no gradient), on any tensor of the shapes above.
namespace ep_ops {
// The reordering on either side of an all-to-all (Note [Expert parallelism] in
// nn/expert_exchange.h): rows in blocks (i, j) of counts[i inner + j] rows, i-major (i = 0's
// blocks first), into the same blocks j-major, by one gather (ops::embedding) of the rows
// (sum counts, d) with the index below, on their device; rows themselves when outer or
// inner is 1. Its inverse is transpose_blocks of the result with counts transposed (inner,
// outer) and the two swapped.
Tensor transpose_blocks(const Tensor& rows, const std::vector<int64_t>& counts, size_t outer, size_t inner);
// Row r of the reordered rows is row index[r] of the input.
std::vector<int64_t> transpose_blocks_index(const std::vector<int64_t>& counts, size_t outer, size_t inner);

Tensor to_experts(const Tensor& slots, Communicator& ep);
Tensor from_experts(const Tensor& outputs, Communicator& ep);
Tensor to_experts(const Tensor& rows, const nn::ExpertRows& counts, Communicator& ep);
Tensor from_experts(const Tensor& outputs, const nn::ExpertRows& counts, Communicator& ep);
}  // namespace ep_ops

}  // namespace triad::parallel
