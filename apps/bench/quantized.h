// `triad-bench quantized`: the integer GEMM of quantized linear layers
// (ops::quantized_linear, W8A8 and W4A8, activations quantized per token inside the timed
// call) against the f32 GEMM (ops::linear) of the same shapes, in the same run on the CPU,
// at GPT-2 124M's linear shapes by default. Rates are 2 M N K operations over the median
// time; the speedup is the f32 time over the integer one.
#pragma once

#include "common/cli_app.h"
#include <cstdint>
#include <vector>

namespace triad::bench {

struct QuantizedOptions {
  std::vector<int64_t> tokens = {1, 16, 128, 1024};  // M
  // (K in, N out) pairs, flattened: attention projection, MLP up, MLP down
  std::vector<int64_t> shapes = {768, 768, 768, 3072, 3072, 768};
  int64_t group_size = 128;
  int threads = 0;   // OpenMP threads (0: one per core)
  int repeats = 10;  // timed runs of each GEMM; figures are medians
};

void add_quantized_command(CLI::App& app, QuantizedOptions& options);
int run_quantized_bench(const QuantizedOptions& options);

}  // namespace triad::bench
