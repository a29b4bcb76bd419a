// How the experts of a Mixture-of-Experts layer are spread over processes: the seam where
// expert parallelism plugs into nn::MoE, as parallel::TensorParallel implements
// nn::Parallelism. This header is the single-process case, which moves nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

namespace triad::nn {

// Note [Expert parallelism]
// nn::MoE runs in three stages: dispatch writes this process's tokens into the rows each
// expert runs on; the experts run on their rows; combine reads the outputs back into
// tokens, weighted by the gate. Under expert parallelism over ep ranks, rank r holds the
// E/ep experts [r E/ep, (r+1) E/ep) and an exchange runs between the stages: to_experts,
// an all-to-all over the ep group, sends each rank the rows of its experts, so that each
// rank gets, for each of its experts, the rows every rank routed to it (rank 0's first,
// then rank 1's, ...); from_experts, the inverse all-to-all, returns the outputs to the
// ranks whose tokens they are. Each is the other's adjoint, so gradients flow back through
// them. When dropping tokens, every expert has C slots (E, C, d) on every rank, empty ones
// zero, and the exchanges are all-to-alls of one size. Dropless, every expert gets exactly
// its rows (Note [Dropless exchange]). The routing, the gate and the combine weights stay
// local to each rank.
//
// Note [Dropless exchange]
// Without dropping, an expert's load differs from rank to rank and from step to step.
// DeepSpeed all-reduces the largest load over the ep group (MAX) every step and pads every
// expert's slots to it, so the experts compute on padding rows; here, as Megatron-core's
// alltoall dispatcher does, nothing is padded:
// 1. dispatch gathers this rank's S k routed rows grouped by expert, expert 0's first, each
//    expert's in slot order (ops::moe_indices_dropless; no zero row, no empty slot);
// 2. count_rows: the ranks exchange their per-expert counts (one all-to-all of E/ep counts
//    to each rank), so that every rank knows how many rows each rank sends each of its
//    experts (ExpertRows);
// 3. to_experts: a variable-size all-to-all (Communicator::all_to_allv) sends rank q the
//    rows of its experts, then each expert's rows are gathered from the ranks' blocks: an
//    expert's rows are rank 0's, then rank 1's, ... (one gather of all the rows by an index
//    the counts give, not a copy per block: parallel::ep_ops::transpose_blocks);
// 4. the experts run on exactly their rows (Experts::forward with a count per expert,
//    grouped GEMMs of a row count per group: Note [Grouped experts]), an expert without
//    rows on none;
// 5. from_experts undoes step 3 (the blocks back to rank order by the inverse gather, the
//    reverse all_to_allv) and combine gathers each choice's output row. The backward of
//    each exchange is the other one.
// Each token row is thus copied by the dispatch gather, the all_to_allv and the reordering
// gather on its way to an expert (on one process by the dispatch gather alone), and as
// often on its way back, in the forward as in the backward.
// On one process the exchanges move nothing, and the layer computes what the padded layout
// computed on its non-padding rows.
struct ExpertRows {
  int ranks = 1;
  std::vector<int64_t> sent;      // (E): rows this process sends to each expert, in expert order
  std::vector<int64_t> received;  // (ranks, E / ranks): rows rank q sends to each expert here, q-major
  // (E / ranks): the rows each expert of this process runs on, from all the ranks.
  std::vector<int64_t> per_expert() const {
    const size_t local = received.size() / size_t(ranks);
    std::vector<int64_t> rows(local, 0);
    for (size_t i = 0; i < received.size(); ++i) rows[i % local] += received[i];
    return rows;
  }
};

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  // Processes the experts are spread over: each holds num_experts / ranks() of them.
  virtual int ranks() const { return 1; }
  // This process's place among them: it holds experts [rank E / ranks, (rank + 1) E / ranks).
  virtual int rank() const { return 0; }
  // slots (E, C, d) of this process's tokens -> (E / ranks, ranks C, d) for its experts.
  virtual Tensor to_experts(const Tensor& slots) const { return slots; }
  // The inverse: the experts' outputs (E / ranks, ranks C, d) -> (E, C, d) of its tokens.
  virtual Tensor from_experts(const Tensor& outputs) const { return outputs; }

  // Dropless (Note [Dropless exchange]). sent (E): the rows this process routed to each
  // expert; the counts travel on `device` (where the rows are). Every rank of the group
  // calls it in every dropless forward.
  virtual ExpertRows count_rows(const std::vector<int64_t>& sent, Device /*device*/) const {
    return {.ranks = 1, .sent = sent, .received = sent};
  }
  // rows (sum sent, d) grouped by expert -> (sum received, d) grouped by this process's
  // experts, each expert's rows rank 0's, then rank 1's, ...
  virtual Tensor to_experts(const Tensor& rows, const ExpertRows& /*counts*/) const { return rows; }
  // The inverse: the experts' outputs (sum received, d) -> (sum sent, d) of its tokens.
  virtual Tensor from_experts(const Tensor& outputs, const ExpertRows& /*counts*/) const { return outputs; }
};

// Every expert in this process.
inline const std::shared_ptr<const ExpertExchange>& local_experts() {
  static const std::shared_ptr<const ExpertExchange> local = std::make_shared<ExpertExchange>();
  return local;
}

}  // namespace triad::nn
