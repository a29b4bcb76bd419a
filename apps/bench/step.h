// `triad-bench step`: times full training steps (forward, backward, AdamW) of a GPT through
// the Engine, on the cpu or a GPU, in f32 or bf16 (mixed precision).
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct StepOptions {
  std::string model = "tiny";
  std::string config;                  // a triad-train config: its model
  std::vector<std::string> overrides;  // --set dotted.key=value on that config
  int64_t batch = 4;
  int64_t seq = 64;
  int threads = 0;
  int steps = 10;
  int warmup = 2;
  bool checkpointing = false;
  int tp = 1;                  // tensor-parallel ranks: run under mpirun -np tp
  bool sequence_parallel = false;
  std::string device = "cpu";  // as the config's `device`: cpu, cuda, cuda:N
  std::string dtype;           // f32 or bf16; "": f32 on the cpu, bf16 on a GPU
  // Record the step once as a CUDA graph and replay it (cuda_graph.enabled, Note [Recorded
  // steps] in engine/step_recording.h): the step is timed whole, its phases not apart.
  bool cuda_graph = false;
  // MFU's denominator, the device's dense bf16 peak in TFLOP/s; 0: recognised from a GPU's
  // name (989, H100/H200 SXM, when not), and no MFU on the cpu.
  double peak_tflops = 0;
};

// What a GPU run measures unless told otherwise: GPT-2 124M, 16 sequences of 1024 tokens.
inline constexpr const char* kGpuModel = "gpt2-124m";
inline constexpr int64_t kGpuBatch = 16;
inline constexpr int64_t kGpuSeq = 1024;

void add_step_command(CLI::App& app, StepOptions& options);
int run_step_bench(const StepOptions& options);

// The dense (no sparsity) bf16 tensor-core peak in TFLOP/s of a GPU from the name
// cudaGetDeviceProperties gives ("NVIDIA H100 80GB HBM3": 989), per the vendor's data
// sheets; 0 for a name it does not know.
double dense_bf16_peak_tflops(const std::string& device_name);

}  // namespace triad::bench
