// The training loop of triad-train: data, engine, progress lines, validation, metrics and
// the model file at the end.
#pragma once

#include <string>

#include "engine/config.h"

namespace triad::app {

struct TrainOptions {
  std::string metrics_path;  // JSON lines, one per optimizer step ("" : none)
};

// Runs the whole training described by `config`; throws Error on bad input or a non-finite
// loss (nothing is saved then).
void train(const engine::TrainConfig& config, const TrainOptions& options);

}  // namespace triad::app
