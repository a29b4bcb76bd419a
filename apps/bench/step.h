// `triad-bench step`: times full training steps (forward, backward, AdamW) of a GPT.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace triad::bench {

struct StepOptions {
  std::string model = "tiny";
  std::string config;                  // a triad-train config: its model and micro-batch
  std::vector<std::string> overrides;  // --set dotted.key=value on that config
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
