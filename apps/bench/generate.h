// `triad-bench generate`: batched generation (engine/generate.h, Note [Batched generation])
// through the Engine's model, as triad-rlhf's PPO generates, timed on the cpu or a GPU. By
// default the RLHF demo's actor (configs/rlhf-demo.json's model, random weights) continues 32
// prompts of 16 random tokens by 32 tokens each, sampled untruncated at temperature 1 (PPO's
// defaults) with no stop token, so every run makes batch x answer tokens. Per run: the
// generate call's wall time (the device finished), generated tokens/s and ms per step;
// medians over --runs after --warmup. The last line is one JSON object.
//
// On a GPU the decode step replays as a CUDA graph (Note [Decode graphs] in
// engine/generate.h) unless --no-cuda-graph; --check-eager also times the same calls without
// graphs, checks that they generate the same tokens, log-probabilities and masks bit for bit,
// and reports both figures and their ratio (the command fails when they differ).
//
// Target (a GPU): >= 50k generated tokens/s for the demo's actor at batch 32.
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct GenerateOptions {
  std::string model = "tiny";
  std::string config;  // a triad-train config: its model
  // --set dotted.key=value on that config or preset. The default: the RLHF demo's actor.
  std::vector<std::string> overrides = {"model.n_layer=2", "model.n_head=4", "model.d_model=128", "model.seq_len=64",
                                        "model.vocab_size=2048"};
  int64_t batch = 32;   // prompts
  int64_t prompt = 16;  // tokens per prompt
  int64_t answer = 32;  // generated tokens per prompt
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  std::string device = "cpu";  // as the config's `device`: cpu, cuda, cuda:N
  std::string dtype;           // f32 or bf16; "": f32 on the cpu, bf16 on a GPU
  int runs = 5;
  int warmup = 1;
  int threads = 0;
  bool cuda_graph = true;    // SamplingOptions::cuda_graph
  bool check_eager = false;  // also run without graphs; the results must be equal
};

void add_generate_command(CLI::App& app, GenerateOptions& options);
int run_generate_bench(const GenerateOptions& options);

}  // namespace triad::bench
