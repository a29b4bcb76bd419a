// `triad-bench quantized`: the integer GEMM of quantized linear layers
// (ops::quantized_linear, W8A8 and W4A8, activations quantized per token inside the timed
// call) against the f32 and bf16 GEMMs (ops::linear) of the same shapes, in the same run, on
// the cpu or a GPU (there the integer GEMM of Note [Integer GEMM on the GPU]), at GPT-2
// 124M's linear shapes by default. Rates are 2 M N K operations over the median time; the
// speedups are the f32 and bf16 times over the integer one. Then generation: a model of
// random weights (GPT-2 124M on a GPU, the RLHF demo's actor on the cpu) continues --batches
// prompts greedily in f32, in bf16, with its blocks' linear layers W8A8 and with its token
// table (and tied head) W8A8 too (the f32 model quantized with --group-size as
// triad-compress zeroquant, with and without --quantize-embeddings, and loaded as
// triad-generate loads it), in generated tokens/s; and the quantized models' bytes in memory
// against the f32 model's (engine::model_bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/cli_app.h"

namespace triad::bench {

struct QuantizedOptions {
  std::vector<int64_t> tokens = {1, 16, 128, 1024};  // M
  // (K in, N out) pairs, flattened: attention projection, MLP up, MLP down
  std::vector<int64_t> shapes = {768, 768, 768, 3072, 3072, 768};
  int64_t group_size = 128;
  std::string device = "cpu";  // cpu, cuda, cuda:N
  int threads = 0;             // OpenMP threads (0: one per core)
  int repeats = 10;            // timed runs of each GEMM; figures are medians
  // Generation (none when empty): prompts per call, prompt and answer tokens, the model
  // preset ("": gpt2-124m on a GPU, the RLHF demo's actor on the cpu).
  std::vector<int64_t> batches = {1, 16};
  int64_t prompt = 16, answer = 64;
  std::string model;
};

void add_quantized_command(CLI::App& app, QuantizedOptions& options);
int run_quantized_bench(const QuantizedOptions& options);

}  // namespace triad::bench
