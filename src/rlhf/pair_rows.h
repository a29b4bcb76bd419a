// What the reward model's and DPO's loops share: their data (the reward split's pairs) and
// which pairs each rank takes, in training and in held-out evaluation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "rlhf/rlhf_config.h"
#include "rlhf/step_examples.h"

namespace triad::rlhf {

// The reward split's pairs, data.val_fraction of them held out. Error naming `what` on bad
// data (step_examples), or when data.max_seq_len exceeds the model's seq_len.
StepExamples pair_examples(const StepConfig& sc, const io::Tokenizer& tokenizer, const std::string& what);

// The pairs micro-batch m of step `step` takes on `rank` of `ranks`: the global batch's
// pairs step·B .. step·B + B − 1 of `order`, micro-batch m of rank r holding those from
// (m·ranks + r)·micro on.
std::vector<int64_t> micro_batch_pairs(EpochOrder& order, const engine::TrainConfig& c, int64_t step, int64_t m,
                                       int rank, int ranks);

// One round of held-out evaluation on a rank: `micro` pairs, the first `counted` of them
// real (rank, rank + ranks, ...); the rest repeat pair 0 so that every rank runs the same
// forwards (ZeRO-3 gathers in each).
struct HeldOutRound {
  std::vector<int64_t> pairs;
  int64_t counted = 0;
};
std::vector<HeldOutRound> held_out_rounds(int64_t held_out, int64_t micro, int rank, int ranks);

}  // namespace triad::rlhf
