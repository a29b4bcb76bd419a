// The training loop behind triad-train: data, engine, one progress line per log_interval
// steps, validation, metrics, checkpoints (resume, every checkpoint.every steps and at the
// end), and the trained weights (output_dir/model.h5) at the end.
#pragma once

#include <string>

#include <memory>

#include "config/config.h"
#include "train/training_data.h"
#include "parallel/communicator.h"

namespace triad::engine {

struct TrainOptions {
  std::string metrics_path;  // JSON lines, one per optimizer step ("" : none; appended to on resume)
  std::string resume;        // "" (fresh start), "auto", a checkpoint file or folder (checkpoint/checkpoint_dir.h)
  std::string save_dir;      // overrides checkpoint.dir
  // Weights only (a checkpoint or weights file of the same model): the run starts from them
  // at step 0 with a fresh optimizer (fine-tuning), unless it resumes from a checkpoint.
  std::string init;
  // Stop after the step in which any rank caught SIGUSR1 or SIGTERM, write a checkpoint and
  // throw Preempted (Note [Preemption], train/preemption.h; the caller installs the handlers).
  bool stop_on_signal = false;
};

// Runs the whole training described by `config`; throws Error on bad input or a non-finite
// loss (nothing is saved then).
// With the job's communicator (world), every rank calls train() with the same config
// (checked before anything else); the ranks form the grid the config lays out
// (engine::process_grid: tp × dp × pp, one rank without `world`) and each tp group takes
// its rows of each global batch;
// rank 0 prints, writes the metrics and saves the model. Returns the last validation loss
// (NaN without a validation split). The batches come from `data`, by default the token
// file of config.data (corpus_data).
double train(const TrainConfig& config, const TrainOptions& options, parallel::CommunicatorPtr world = nullptr,
             std::unique_ptr<TrainingData> data = nullptr);

}  // namespace triad::engine
