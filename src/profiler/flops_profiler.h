// DeepSpeed's flops profiler: at optimizer step `profile_step` (counting completed steps
// from 0, as DeepSpeed's global_steps does) the first micro-batch's forward is profiled
// module by module: parameters, multiply-accumulates and floating-point operations (the
// forwards' counts, autograd/flop_count.h) and forward latency, each including the
// module's children, with the device synchronized at every module boundary. The report,
// printed by rank 0 after that step in DeepSpeed's layout, gives the summary (per-GPU and
// model totals, forward/backward/step latency and the FLOPS they imply), the top modules
// per depth aggregated by type, and the module tree with each module's figures.
//
// The profiler's hooks stay on the model and do nothing outside the profiled forward.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "tensor/device.h"

namespace triad::engine {

struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;
  int64_t module_depth = -1;  // deepest level of the aggregated profile (-1: all)
  int64_t top_modules = 1;    // types listed per depth in the aggregated profile
  bool detailed = true;       // print the module tree
  std::string output_file;    // "": standard output
  double recompute_fwd_factor = 0.0;  // forwards recomputed in the backward (activation checkpointing: 1)
};

// What the report says about the run and what the trainer timed around the profiled step.
struct ProfiledStep {
  int64_t step = 0;  // profile_step
  int world_size = 1, data_parallel = 1, model_parallel = 1;
  int64_t micro_batch = 1;
  double forward_s = 0, backward_s = 0, step_s = 0;  // the micro-batch's forward and backward; the optimizer step
};

class FlopsProfiler {
 public:
  FlopsProfiler(const nn::ModulePtr& model, Device device);
  void start();  // clears the figures; the next forwards are profiled
  void stop();
  std::string report(const ProfiledStep& step, const FlopsProfilerConfig& config) const;

  struct ModuleStats {
    std::string name, type;  // dotted name ("" for the model), type name
    int depth = 0;
    int64_t params = 0, macs = 0, flops = 0;
    double seconds = 0;
    std::vector<size_t> children;  // indices into modules()
  };
  const std::vector<ModuleStats>& modules() const;  // the model first, then depth-first

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// DeepSpeed's number formatting: "336.23 M", "3.14 GMACs", "81.9 TFLOPS", "76.67 ms".
std::string number_to_string(double value, const std::string& suffix = "");

}  // namespace triad::engine
