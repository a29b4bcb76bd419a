// Pipeline schedules as data: the list of actions each stage runs for one optimizer step
// (estimate/pipeline_time.h times those lists: the estimator's and benchmarks' bubble).
//
// Note [Pipeline schedules]: p ranks (stages), m micro-batches, v chunks per rank. The model
// is cut into v·p virtual stages; rank r holds virtual stages r, p + r, 2p + r, ... (chunk c
// is virtual stage c·p + r, Megatron's interleaving). Dependencies, for micro-batch k:
//   forward (k, vs)         after forward (k, vs − 1)
//   backward / input-grad   after forward (k, vs) and the input gradient of (k, vs + 1)
//   weight-grad (k, vs)     after the input gradient of (k, vs), on the same rank
// A schedule's lists run every (k, chunk) forward exactly once per rank and its backward
// exactly once (ZB-H1: one input-gradient and one weight-gradient action, W after I), and
// every rank can run its list in order without deadlock, sends never waiting
// (simulate_pipeline, estimate/pipeline_time.h, checks this; the executor's paired sends
// wait no longer than a lone receive would, Note [Paired pipeline messages]).
//   gpipe        all forwards F0..F(m−1), then all backwards B0..B(m−1).
//   1f1b         PipeDream-flush / Megatron's non-interleaved schedule: min(p − r − 1, m)
//                warm-up forwards, then one forward and one backward in turn, then the
//                remaining backwards. At most min(p − r, m) micro-batches live on rank r.
//   interleaved  Megatron's interleaved 1F1B (m a multiple of p): the m·v passes go in
//                groups of p micro-batches per chunk (forwards chunk 0 → v − 1, backwards
//                v − 1 → 0), with min((p − r − 1)·2 + (v − 1)·p, m·v) warm-up forwards.
//   zb_h1        Zero Bubble's handcrafted H1 (Qi et al., arXiv 2401.10241, Fig. 3): 1F1B's
//                order of forwards and input-gradient passes (I), each weight-gradient pass
//                (W) deferred: rank r keeps up to r W's pending (the oldest runs after each
//                later I) and runs its last r W's at the end, in the tail that 1F1B leaves
//                idle. Activations live on rank r as in 1F1B (min(p − r, m) micro-batches
//                from F to I), plus up to r micro-batches awaiting W: never more than p.
#pragma once

#include <string>
#include <vector>

namespace triad::parallel {

enum class PipeSchedule { gpipe, one_f_one_b, interleaved, zb_h1 };
// "gpipe", "1f1b", "interleaved", "zb_h1"; any other name throws Error naming
// pipeline.schedule.
PipeSchedule parse_pipe_schedule(const std::string& name);
std::string pipe_schedule_name(PipeSchedule);

// backward: the input and weight gradients together (gpipe, 1f1b, interleaved);
// backward_input and backward_weight: the two halves, run apart (zb_h1).
enum class PipeOp { forward, backward, backward_input, backward_weight };
struct PipeAction {
  PipeOp op;
  int micro;  // micro-batch, 0..m − 1
  int chunk;  // 0..v − 1: virtual stage chunk·p + rank
  bool operator==(const PipeAction&) const = default;
};
// "F3", "B3", "I3" (input gradient), "W3" (weight gradient); chunk c > 0 adds ".c": "F3.1".
std::string to_string(const PipeAction&);

// Throws Error naming the config keys unless stages >= 1 (pipeline.stages), micro_batches
// >= 1 (gradient_accumulation_steps), chunks >= 1 (pipeline.virtual_stages), chunks == 1
// unless interleaved, and, for interleaved, micro_batches a multiple of stages.
void check_pipe_schedule(PipeSchedule, int stages, int micro_batches, int chunks);

// The actions rank `rank` of `stages` runs, in order, for one optimizer step of
// micro_batches micro-batches (Note [Pipeline schedules]). Checks the arguments as
// check_pipe_schedule does, and rank in [0, stages).
std::vector<PipeAction> pipe_actions(PipeSchedule, int stages, int rank, int micro_batches, int chunks = 1);

// The most (micro-batch, chunk) pairs live at once in one rank's list, a pair being live
// from its forward until its backward or input-gradient action (its weight-gradient action,
// which needs less, is not counted). In units of one chunk's activations.
int peak_live_micro_batches(const std::vector<PipeAction>& actions);

}  // namespace triad::parallel
