// The examples one RLHF step trains on, and the order it visits them in (Note [SFT rows]
// describes both; every step uses them alike).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "rlhf/preference_data.h"

namespace triad::rlhf {

struct StepExamples {
  std::vector<PreferenceExample> train, held_out;
};

// The rows of `path` in split `split_index` of data_split (0 SFT, 1 reward, 2 RL), tokenized
// (prompts beyond limits.max_prompt_seq_len dropped), the first round(val_fraction m) of the
// m left held out. Throws Error naming `what` and the file when the split is empty, every
// prompt is too long, or nothing is left to train on.
StepExamples step_examples(const std::string& path, RlhfStep step, int split_index, const std::string& data_split,
                           const io::Tokenizer& tokenizer, const SequenceLimits& limits, double val_fraction,
                           uint64_t seed, const std::string& what);

// Example g of an endless stream over t examples: epoch e = g div t visits them in the order
// seeded_permutation(t, seed + e), so every epoch visits each once and example g is a pure
// function of g.
class EpochOrder {
 public:
  EpochOrder(int64_t examples, uint64_t seed) : t_(examples), seed_(seed) {}
  int64_t at(int64_t g);

 private:
  int64_t t_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;  // the permutation of epoch_
};

}  // namespace triad::rlhf
