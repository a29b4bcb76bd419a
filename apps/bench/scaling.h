// `triad-bench scaling`: weak and strong scaling of training steps over 1..N ranks for each
// ZeRO stage, each point next to the step time the performance model (estimate/perf_model.h)
// predicts for it.
//
//   triad-bench scaling --mode weak|strong --ranks 1,2,4 --stages 0,1,2,3
//       [--model tiny | --config FILE] [--set k=v]... --batch B --seq T --steps N --warmup W
//       --out DIR [--interconnect calibrate|config] [--flops F] [--repeats R] [--tp T]
//
// weak: B sequences per rank (global batch B·n); strong: global batch B (B/n per rank).
// --tp T: every point splits the model over groups of T consecutive ranks (model.tensor_parallel)
// and scales the n/T data-parallel groups: "per rank" above reads "per group", the compute
// calibration runs T-rank groups (their tp collectives included), and the model's ZeRO
// collectives move each tp rank's part of the parameters over the n/T groups.
// Every point is one `triad-bench zero --worker` job under mpirun (bench/workers.h), run
// --repeats times (its ms/step is the median of the runs' medians). The model's machine
// comes from --interconnect: `calibrate` (the default) measures it on this machine first:
// the compute rate from a 1-rank stage 0 run of the same model and per-rank batch (the
// first rank count's), and α and β of the shared-memory link from a `triad-bench
// collectives` sweep (all_reduce, reduce_scatter, all_gather) on every rank count above 1,
// with every rank on one node of as many cores as this machine has (ranks beyond the cores
// time-share them: Note [Step time model]); `config` takes the config's "cluster" section
// (config/config.h). --flops replaces the compute rate of either.
//
// Per point it reports ms/step, tokens/s, scaling efficiency (weak: t1/tN; strong:
// t1/(N·tN), against the same stage on the smallest rank count), bus bytes per step,
// model-state bytes per rank, and the predicted ms/step with its error. It writes
// DIR/scaling.csv (one row per point, stage-major), DIR/scaling.gp (the gnuplot script)
// and DIR/scaling.png (1200x800: tokens/s and efficiency against ranks, one line per
// stage, predictions dashed), and ends with one JSON object.
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct ScalingOptions {
  std::string mode = "weak";  // weak | strong
  std::string model = "tiny";
  std::string config;                  // a triad-train config: model, optimizer, zero keys, cluster
  std::vector<std::string> overrides;  // --set dotted.key=value
  std::vector<int> ranks = {1, 2, 4};
  std::vector<int> stages = {0, 1, 2, 3};
  int tp = 1;         // tensor-parallel ranks per data-parallel rank (every rank count a multiple)
  int64_t batch = 8;  // weak: sequences per (data-parallel) rank; strong: global sequences
  int64_t seq = 64;
  int threads = 1;  // OpenMP threads per rank: one rank stands for one device
  int steps = 10;
  int warmup = 2;
  int repeats = 1;
  std::string out;                         // DIR for scaling.csv, scaling.gp, scaling.png
  std::string interconnect = "calibrate";  // calibrate | config
  double flops = 0;                        // FLOP/s per rank; 0: from --interconnect
  // Internal: a collectives calibration worker under mpirun.
  bool worker = false;
  std::string max_bytes = "4M";
};

void add_scaling_command(CLI::App& app, ScalingOptions& options);
int run_scaling_bench(const ScalingOptions& options);

}  // namespace triad::bench
