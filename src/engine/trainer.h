// The training loop behind triad-train: data, engine, one progress line per log_interval
// steps, validation, metrics, and the model file at the end.
#pragma once

#include <string>

#include "engine/config.h"

namespace triad::engine {

struct TrainOptions {
  std::string metrics_path;  // JSON lines, one per optimizer step ("" : none)
};

// Runs the whole training described by `config`; throws Error on bad input or a non-finite
// loss (nothing is saved then).
// Returns the last validation loss (NaN without a validation split).
double train(const TrainConfig& config, const TrainOptions& options);

}  // namespace triad::engine
