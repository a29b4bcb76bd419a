// triad-estimate --time for a pp × dp × tp layout (layout_memory.h): the step-time model of
// Note [Step time model] per pipeline stage, joined by the pipeline's schedule.
//
//   per stage r   the ZeRO model over dp for the stage's parameters and FLOPs (its share of
//                 6N + 6LCT on one tp rank) gives its compute c_r per micro-batch and its
//                 exposed data-parallel communication (step − compute). The dp ranks of a
//                 tp group sit tp apart, so a node holds ranks_per_node / tp of them (and
//                 its cores_per_node / tp cores).
//   tp            Megatron's all-reduces of the (B, T, C) f32 activation over the tp ranks
//                 (consecutive, inside a node), on the critical path: per block 2 in the
//                 forward and 2 in the backward, 1 in the embedding's forward and 1 in the
//                 head's backward, and the vocab-parallel loss's two small ones (B·T and
//                 2B·T floats). With sequence parallelism each is an all-gather and a
//                 reduce-scatter of the same tensor, whose ring cost is the same (the
//                 embedding's and head's one of the pair).
//   micro-batch   F = c/3 + tp forward, B = 2c/3 + tp backward (I = W = B/2), of the
//                 slowest stage, which paces the pipeline. Every stage is taken at that
//                 cost, as the closed forms assume balanced stages: with lighter stages
//                 (GPT-2's embedding and head alone) the fill and drain are shorter than
//                 this, so the step is an upper bound on the schedule's.
//   p2p           one activation (B, T', C) f32 per micro-batch boundary each way, α + S/β
//                 over the inter-node link, or the intra-node one when the whole job fits
//                 a node.
//   pipeline      the schedule's action lists timed by simulate_pipeline with those costs
//                 (a chunk costs 1/v of its stage). Without p2p this is m(F + B)/(1 − bubble),
//                 the closed form: (m + p − 1)/m of the ideal for GPipe and 1F1B.
//   step          pipeline + the slowest stage's exposed dp communication + the tied token
//                 table's gradient all-reduce between the first and last stages (pp > 1).
#pragma once

#include <nlohmann/json.hpp>

#include "estimate/layout_memory.h"
#include "estimate/step_time.h"

namespace triad::estimate {

struct LayoutTime {
  Cluster cluster;
  std::string flops_source;
  DType dtype = DType::bf16;
  bool overlap_comm = true;
  struct Stage {
    int rank = 0;
    double compute_s = 0;                        // per micro-batch
    double tp_forward_s = 0, tp_backward_s = 0;  // per micro-batch
    StepEstimate dp;                             // the whole step's, over dp
    double exposed_dp_s = 0;
  };
  std::vector<Stage> stages;
  double forward_s = 0, backward_s = 0;  // per micro-batch, the slowest stage
  double p2p_bytes = 0, p2p_s = 0;
  bool p2p_inter_node = false;
  double tied_s = 0;
  double ideal_s = 0;     // m (F + B)
  double bubble = 0;      // closed form (no p2p)
  double pipeline_s = 0;  // simulated makespan, p2p included
  double exposed_dp_s = 0;
  double step_s = 0, tokens_per_s = 0;
  double tokens_per_step = 0;
};

// Throws Error for a missing compute rate or a cluster that cannot place the layout.
LayoutTime compute_layout_time(const TimeOptions& options, const TimeModel& model, const LayoutMemory& memory);
nlohmann::json print_layout_time(const LayoutTime& time);

}  // namespace triad::estimate
