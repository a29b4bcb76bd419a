// `triad-bench moe`: training steps of a GPT with Mixture-of-Experts blocks against the
// dense GPT of the same shape, whose active FLOPs per token are the same at top-1 (each
// token runs one expert of the dense MLP's shape, plus the gate's C x E), timed step by
// step in alternation on one process; and how the MoE layers spread their tokens.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace triad::bench {

struct MoEBenchOptions {
  std::string model = "tiny";  // a GPT preset
  int64_t experts = 8;
  int64_t top_k = 1;
  int64_t every = 2;
  double capacity_factor = 1.0;
  int64_t batch = 8;
  int64_t seq = 64;
  int threads = 0;
  int steps = 10;
  int warmup = 2;
};

void add_moe_command(CLI::App& app, MoEBenchOptions& options);
int run_moe_bench(const MoEBenchOptions& options);

}  // namespace triad::bench
