// Where the experts of MoE layers live for ZeRO under expert parallelism (Note [Expert
// parallelism] in nn/expert_exchange.h): the parameters marked TensorSplit::expert are held
// by the ranks of an expert-data-parallel group only, DeepSpeed's E+D layout.
//
// Note [ZeRO with experts]: in each unit the expert parameters form flat groups of their
// own (zero/flat_group.h), padded and sharded over the expert-data-parallel group edp
// (dp / ep ranks) instead of dp: their gradients are all-reduced (stage 0) or
// reduce-scattered (stages 1–3) over edp, stage 3 gathers them over edp for their forward
// and backward, and stages 1–2 all-gather them over edp after the step. An expert's
// gradient on its rank already holds what the tokens of every rank of its ep group
// contributed (the backward of the all-to-all brought them), so its sum over edp is the sum
// over all dp ranks' tokens: it is averaged by dp, as the dense gradients are. The global
// norm counts every expert element once over the world: at stages 1–3 the dp all-reduce of
// the shards' squares does (edp shards of each expert, ep distinct sets of experts); at
// stage 0, where edp replicates experts and dp the rest, the dense squares count on dp rank
// 0 and the experts' on edp rank 0, summed over dp. Checkpoints see the experts' slices by
// their global names like any other parameter's (owned_slices: each element on one rank).
// ZeRO++ with experts spread: qwZ quantizes the experts' forward gathers over edp as it does
// the dense ones over dp; hpZ's secondary shards and qgZ's two-hop reduction run over dp's
// hpZ and node groups, so they apply to the dense groups only, and the expert groups gather
// from their primary shards and reduce-scatter exactly over edp (a group of dp / ep ranks,
// the size hpZ's groups shrink the dense gathers to when ep is the ranks per node).
#pragma once

#include "parallel/communicator.h"
#include "zero/zero_config.h"

namespace triad::zero {

struct ExpertPlacement {
  // The ranks holding this rank's experts; null: no expert parallelism (experts are
  // reduced and sharded over dp with the rest).
  parallel::CommunicatorPtr edp;
  bool spread() const { return edp != nullptr; }
};

// Error unless `experts` (when spread) has a size dividing a dp group of dp ranks.
void check_expert_placement(const ExpertPlacement& experts, int dp);

}  // namespace triad::zero
