// The time one optimizer step of a pipeline schedule takes: its action lists
// (parallel/pipeline_schedule.h, Note [Pipeline schedules]) simulated with a cost per
// action, and the closed-form bubble they are checked against. Pure arithmetic, as
// estimate/model_states.h: triad-estimate prices schedules with it and triad-bench
// pipeline sets the measured step beside it.
#pragma once

#include <utility>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace triad::estimate {

// Durations of one action on one rank (with chunks, of one chunk: a chunk costing 1/v of
// the whole stage takes forward/v). parallel::PipeOp::backward costs backward_input +
// backward_weight. p2p: the delay of a message between two ranks (none within a rank).
struct PipeCosts {
  double forward = 1, backward_input = 1, backward_weight = 1;
  double p2p = 0;
};

struct PipeTimeline {
  std::vector<std::vector<std::pair<double, double>>> spans;  // [rank][action]: start, end
  double makespan = 0;                                        // the last end (the first start is 0)
  std::vector<double> idle;                                   // [rank]: makespan − busy time
  double bubble_fraction = 0;                                 // mean over ranks of idle / makespan
};

// Runs each rank's list (lists[r] for rank r of lists.size(), chunks chunks per rank) in
// order, every action as soon as the previous one on its rank has ended and its inputs
// have arrived (p2p after they were made on another rank). Throws Error naming the rank
// and action if an action is malformed or repeated on a rank, or if the lists deadlock
// (an input that never comes: missing from every list, or waiting in a cycle).
PipeTimeline simulate_pipeline(const std::vector<std::vector<parallel::PipeAction>>& lists, int chunks,
                               const PipeCosts&);
// The same for pipe_actions' lists of every rank.
PipeTimeline simulate_pipeline(parallel::PipeSchedule, int stages, int micro_batches, int chunks, const PipeCosts&);

// The closed-form bubble fraction (idle time over the step's time, p2p not counted), with
// F, B, W = costs.forward, backward_input, backward_weight:
//   gpipe, 1f1b   (p − 1)(F + B + W) / ((m + p − 1)(F + B + W)) = (p − 1)/(m + p − 1)
//   interleaved   (p − 1)/(v·m + p − 1): Megatron's bubble (p − 1)/(v·m) of the ideal
//                 time (Narayanan et al. 2021), as a fraction of the whole step; F, B, W
//                 are a chunk's costs
//   zb_h1         (p − 1)(F + B − W) / (m(F + B + W) + (p − 1)(F + B − W)), from the
//                 paper's bubble (p − 1)(T_F + T_B − T_W)
// With p2p = 0, simulate_pipeline's bubble_fraction equals these for gpipe, 1f1b and
// interleaved with any costs, and for zb_h1 when m >= p and W <= min(F, B) (the paper's
// F = B = W among them); otherwise zb_h1's is a lower bound (while F + B >= W): too few
// micro-batches, or W's too long for the gaps they fill (test_pipeline_time checks).
double theoretical_bubble(parallel::PipeSchedule, int stages, int micro_batches, int chunks, const PipeCosts&);

}  // namespace triad::estimate
