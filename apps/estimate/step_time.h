// triad-estimate --time: the step time of each ZeRO stage on each --dp rank count, from the
// step-time model (estimate/perf_model.h, Note [Step time model]): a compute rate and the
// cluster's links. The rate comes from --flops, from a `triad-bench step` JSON line
// (--step-json: its achieved_gflops, measured on one device) or from the config's
// cluster.flops_per_rank; the links from the config's "cluster" section (or the model's
// 8-GPU-node defaults), each key overridable by a flag.
//
//   triad-estimate --config configs/gpt2-124m.json --dp 8,64,512 --time --flops 4e14
//       --micro-batch 8 [--inter-bandwidth-Gbps 400] [--dtype bf16]
//   triad-estimate --params 7.5e9 --dp 64 --time --seq 2048 --micro-batch 1 --step-json step.json
#pragma once

#include "common/cli_app.h"
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "estimate/perf_model.h"
#include "tensor/dtype.h"

namespace triad::estimate {

struct TimeOptions {
  bool enabled = false;     // --time
  double flops = 0;         // FLOP/s per rank; 0: --step-json or the config's
  std::string step_json;    // a triad-bench step output (its last JSON line with achieved_gflops)
  int64_t micro_batch = 0;  // sequences per rank per micro-batch; 0: the config's, else 1
  int64_t seq = 0;          // tokens per sequence; 0: the config's model.seq_len
  int64_t accumulation = 1;
  std::string dtype;  // parameter/gradient dtype: f32, bf16, fp16; "": the config's, else bf16
  bool no_overlap = false;
  // The cluster: a negative value (or 0 for counts and bandwidths) keeps the config's.
  int64_t ranks_per_node = 0, cores_per_node = -1;
  double intra_bandwidth_GBps = 0, intra_latency_us = -1;
  double inter_bandwidth_Gbps = 0, inter_latency_us = -1;
};

// Adds --time and its options to triad-estimate's command line.
void add_time_options(CLI::App& app, TimeOptions& options);

// What the estimate knows about the model and run.
struct TimeModel {
  double params = 0;                 // Ψ
  double persistent_params = 0;      // stage 3: elements kept whole
  int64_t n_layer = 0, d_model = 0;  // 0: unknown (--params): no attention FLOPs, one call per phase
  int64_t seq_len = 0;               // the model's; 0: unknown
  int64_t micro_batch = 0;           // the config's train_micro_batch_size_per_gpu; 0: none
  DType dtype = DType::bf16;         // the config's precision (bf16 with --params)
  bool overlap_comm = true;          // the config's zero_optimization.overlap_comm
  Cluster cluster;                   // the config's cluster section, or the defaults
};

// The cluster the estimate prices: the model's (the config's section), each key the options
// give replaced, and the compute rate from --flops, --step-json or cluster.flops_per_rank
// (named in flops_source). Throws Error when no rate is known.
Cluster resolve_cluster(const TimeOptions& options, const TimeModel& model, std::string& flops_source);

// The model's estimates for every dp and stage, with the inputs they used.
struct StepTimes {
  Cluster cluster;
  std::string flops_source;
  double flops_per_token = 0, tokens_per_rank = 0;
  int64_t micro_batch = 0, seq = 0, accumulation = 1;
  DType dtype = DType::bf16;
  bool attention = false, overlap_comm = true;
  struct Row {
    int64_t dp = 1;
    int stage = 0;
    StepEstimate estimate;
  };
  std::vector<Row> rows;  // dp-major, stages 0..3
};

// Throws Error for a missing or bad input (call it before printing anything).
StepTimes compute_step_times(const TimeOptions& options, const TimeModel& model, const std::vector<int64_t>& dps);
// Prints the table and returns its JSON (inputs, cluster, one row per dp and stage).
nlohmann::json print_step_times(const StepTimes& times);

}  // namespace triad::estimate
