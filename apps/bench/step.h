// `triad-bench step`: times full training steps (forward, backward, AdamW) of a GPT.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace triad::bench {

struct StepOptions {
  std::string model = "tiny";
  int64_t batch = 4;
  int64_t seq = 64;
  int threads = 0;
  int steps = 10;
  int warmup = 2;
  bool checkpointing = false;
};

void add_step_command(CLI::App& app, StepOptions& options);
int run_step_bench(const StepOptions& options);

}  // namespace triad::bench
