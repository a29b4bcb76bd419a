// `triad-bench moe`: training steps of a GPT with Mixture-of-Experts blocks against the
// dense GPT of the same shape, whose active FLOPs per token are the same at top-1 (each
// token runs one expert of the dense MLP's shape, plus the gate's C x E), timed step by
// step in alternation; and how the MoE layers spread their tokens. With --ep under mpirun
// both train data-parallel over the job's ranks (each a batch of its own), the MoE model's
// experts spread over groups of ep ranks, and the all-to-alls' bus bytes per step are
// checked against their closed form: per MoE block, 2 all-to-alls in the forward and 2 in
// the backward, each of the (E, C, d) f32 slots, (ep - 1)/ep of it leaving the rank
// (--dropless: each of the routed rows only, which the closed form does not count).
// With --device cuda both train in f32 on the GPU (routing, token permutation and the
// experts' GEMMs as device kernels), each step timed until the device has finished it.
// The experts' products run as grouped GEMMs (Note [Grouped experts] in nn/moe_experts.h);
// --compare-loop also times the MoE model's steps with its experts run one by one, in the
// same alternation.
#pragma once

#include "common/cli_app.h"
#include <string>

namespace triad::bench {

struct MoEBenchOptions {
  std::string model = "tiny";  // a GPT preset
  int64_t experts = 8;
  int64_t top_k = 1;
  int64_t every = 2;
  double capacity_factor = 1.0;
  bool dropless = false;  // drop_tokens false: every choice routed, exchanged by all_to_allv
  int64_t batch = 8;
  int64_t seq = 64;
  int threads = 0;
  int steps = 10;
  int warmup = 2;
  int ep = 1;  // expert-parallel ranks (> 1: under mpirun, a divisor of the ranks)
  std::string device = "cpu";
  bool compare_loop = false;  // also time the MoE model with its experts run one by one
};

void add_moe_command(CLI::App& app, MoEBenchOptions& options);
int run_moe_bench(const MoEBenchOptions& options);

}  // namespace triad::bench
