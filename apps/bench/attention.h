// `triad-bench attention`: the fused causal attention (ops::causal_attention and its
// backward: flash attention, attention_mma.cu on tensor cores for bf16/f16) at GPT-2 small's
// shapes, beside a bf16 GEMM (ops::matmul: cuBLASLt on a GPU) timed in the same run, so that
// attention's TFLOP/s reads against what the card's GEMM reaches. FLOPs count the causal
// half of the products: forward 4 B NH T^2 hs / 2 (q k^T and p v), backward 2.5 times that
// (five products instead of two); the GEMM 2 M N K. The fused forward is checked against
// the composed attention (matmul, causal softmax, matmul) in f32 on the same rounded values
// (normalized MSE). On the cpu it runs the same code on small default shapes.
//
// Targets (a GPU, bf16, hs 64, T 1024): >= 250 TFLOP/s forward, >= 200 backward.
#pragma once

#include "common/cli_app.h"
#include <cstdint>
#include <string>

namespace triad::bench {

struct AttentionOptions {
  std::string device = "cpu";  // cpu, cuda, cuda:N
  std::string dtype;           // bf16, f16 or f32; "": bf16 on a GPU, f32 on the cpu
  // Shapes; 0: GPT-2 small's on a GPU (B 16, NH 12, T 1024, hs 64), small ones on the cpu.
  int64_t batch = 0, heads = 0, seq = 0, head_size = 0;
  int64_t gemm = 0;  // the GEMM's M = N = K; 0: 8192 on a GPU, 256 on the cpu
  int iters = 20;
  int warmup = 5;
  int threads = 0;
};

// status: 1 when the fused forward disagrees with the composed one.
void add_attention_command(CLI::App& app, AttentionOptions& options, int& status);
int run_attention_bench(const AttentionOptions& options);

}  // namespace triad::bench
