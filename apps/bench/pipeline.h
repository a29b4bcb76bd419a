// `triad-bench pipeline`: pipeline schedules measured against their closed forms.
//
// The parent process (run without mpirun) loops over stages p, schedules and micro-batch
// counts m and runs, for each, this program under `mpirun -np p ... pipeline --worker`.
// Each worker trains one GPT cut into p stages (one rank each, dp = tp = 1) through
// engine::Engine and reports, per stage, from the executor's per-action timings
// (parallel::ActionTiming): the time the stage computed, the time it waited for messages,
// and the pipeline phase's span; the bubble of a stage is 1 − computed / span, where the
// span is the slowest stage's forward-and-backward time of the step (ranks start each step
// together). The figure is the mean over stages and the median over timed steps. Beside it
// the closed form (estimate::theoretical_bubble, with the action costs measured in the same
// run) and the peak activation bytes of each stage: the CPU allocator's peak during the
// step's forwards and backwards above what was in use when it began.
//
// The parent prints one row per run, checks the targets (at p = 2: 1F1B within 0.05 of
// (p − 1)/(m + p − 1) at every m; ZB-H1 at most half of 1F1B's bubble at m = 2p), writes
// pipeline.csv, pipeline.gp and pipeline.png (bubble against m per schedule, one panel per
// p) under --out, and prints one JSON object as its last line.
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct PipelineOptions {
  std::string model = "tiny";
  std::string config;  // a triad-train config: its model, optimizer and clipping
  // --set dotted.key=value on that config or preset. The default makes tiny a model of 8
  // equal blocks whose embedding and head cost little beside them, so stages balance.
  std::vector<std::string> overrides = {"model.n_layer=8", "model.d_model=128", "model.seq_len=128"};
  std::vector<int> stages = {1, 2, 4};
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zb_h1"};
  std::vector<int> micro_factors = {1, 2, 4, 8};  // m = factor · p
  int virtual_stages = 2;                         // of the interleaved schedule
  std::string partition = "type:Block";
  int64_t micro_batch = 2;  // sequences per micro-batch
  int64_t seq = 128;
  int steps = 5;
  int warmup = 2;
  std::string out;  // folder for pipeline.csv, .gp and .png ("": no files, no plot)
  // Internal: set on the processes the parent starts under mpirun.
  bool worker = false;
  std::string schedule = "1f1b";
  int micro_batches = 1;
};

void add_pipeline_command(CLI::App& app, PipelineOptions& options);
int run_pipeline_bench(const PipelineOptions& options);

}  // namespace triad::bench
