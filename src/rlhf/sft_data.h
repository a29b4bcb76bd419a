// DeepSpeed-Chat's step 1 (supervised fine-tuning) data as the training loop reads it
// (train/training_data.h): prompt + chosen answer + <|endoftext|>, the loss on the answer
// (Note [SFT loss mask]), from the SFT split of a preference dataset (Note [Data split]).
//
// Note [SFT rows]: the JSONL rows are split first (split 0 of data_split, so that dropping
// long prompts moves no row between the steps), then tokenized (rows whose prompt exceeds
// max_prompt_seq_len dropped: Note [Preference sequences]); of the m examples left, the
// first round(val_fraction m) (the split is a seeded permutation already) are held out for
// validation and the other t train. Row i of step k's global batch of B rows is training
// example perm_e[g mod t], g = kB + i, e = g div t the epoch and perm_e =
// seeded_permutation(t, seed + e): a pure function of (k, i), so every layout and every
// resumed run reads the same rows, and each epoch visits every example once. Validation
// batch j's row i is held-out example (jB + i) mod v. Padding is <|endoftext|>, whose
// targets are -100.
#pragma once

#include <memory>
#include <string>

#include "train/training_data.h"
#include "io/tokenizer.h"
#include "rlhf/preference_data.h"

namespace triad::rlhf {

struct SftDataOptions {
  std::string path;               // JSONL with "prompt" and "chosen"
  std::string data_split = "2,4,4";
  SequenceLimits limits;
  double val_fraction = 0.05;     // of the SFT split's examples, held out
  bool include_prompt = false;    // the loss on the prompt's tokens too (DeepSpeed-Chat's default)
  uint64_t seed = 1234;
};

// Throws Error naming the file or the option: a row without a needed field, every prompt
// too long, no example left to train on, or sequences (max_seq_len − 1 inputs) longer than
// the model's seq_len.
std::unique_ptr<engine::TrainingData> sft_data(const SftDataOptions& options, const io::Tokenizer& tokenizer,
                                               int64_t model_seq_len);

}  // namespace triad::rlhf
