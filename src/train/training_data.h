// What the training loop (train/trainer.h) reads: the rows of each step's global batch, a
// micro-batch at a time, and the validation micro-batches. Rows are numbered within a
// step's global batch of train_batch_size rows, and row i of step k must depend on (k, i)
// alone (Note [Global batch] in io/sampler.h): a data-parallel rank takes its rows by
// number, so every layout and every resumed run trains on the same rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/config.h"
#include "io/sampler.h"

namespace triad::engine {

class TrainingData {
 public:
  virtual ~TrainingData() = default;
  // Rows [first, first + rows) of step `step`'s global batch of `global` rows: inputs and
  // targets (B, T), T at most the model's seq_len, targets -100 where no loss is taken.
  virtual io::Batch batch(int64_t step, int64_t global, int64_t first, int64_t rows) = 0;
  // Validation micro-batch `index` (of eval_iters), its rows [first, first + rows) of
  // `global`; only called when has_validation().
  virtual bool has_validation() const = 0;
  virtual io::Batch validation(int64_t index, int64_t global, int64_t first, int64_t rows) = 0;
  // What the data is, for the "data:" line, e.g. "7200 training tokens, 800 validation tokens".
  virtual std::string describe() const = 0;
};

// The token file of config.data (`triad-data encode`): windows of seq_len + 1 tokens drawn
// from its first (1 − val_fraction) for training and its last val_fraction for validation
// (io/sampler.h). Throws Error naming the file when it is missing, its vocabulary is larger
// than the model's or disagrees with data.tokenizer, or its validation split is too short.
std::unique_ptr<TrainingData> corpus_data(const TrainConfig& config);

}  // namespace triad::engine
