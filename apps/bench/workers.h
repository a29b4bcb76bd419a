// The parent/worker shape of triad-bench's multi-rank benchmarks (zero, ckpt). The parent
// process runs without mpirun and, once per configuration, runs this same program again
// as `mpirun -np N --oversubscribe --bind-to none <self> <command> --worker <args>`. The
// worker's rank 0 prints its figures as one JSON line; the parent collects it, and a worker
// that fails makes the parent fail with the worker's own error lines.
#pragma once

#include "common/cli_app.h"
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "parallel/communicator.h"

namespace triad::bench {

class WorkerLauncher {
 public:
  using LineHandler = std::function<void(const std::string& line)>;

  // Finds mpirun on PATH and this program's executable; throws Error (naming
  // `triad-bench <command>`) when either is missing, so a sweep fails before it starts.
  explicit WorkerLauncher(std::string command);

  // Runs one worker on `ranks` ranks with `args` after `--worker`, and returns the last
  // JSON line of its output that has the key `result_key`. Each output line is passed to
  // `on_line` as it arrives (progress reports). With more ranks than cores, the workers'
  // OpenMP threads wait passively (unless OMP_WAIT_POLICY is set). Throws Error when the
  // worker fails or prints no result; `label` (e.g. "ranks 4, stage 1") names it there.
  nlohmann::json run(int ranks, const std::vector<std::string>& args, const std::string& label,
                     const std::string& result_key, const LineHandler& on_line = {}) const;

 private:
  std::string command_, mpirun_, self_;
};

// --ranks of a sweep: comma-separated rank counts (positive).
void add_ranks_option(CLI::App& cmd, std::vector<int>& ranks);
// --ranks and --stages of a sweep: comma-separated rank counts (positive) and ZeRO stages (0-3).
void add_sweep_options(CLI::App& cmd, std::vector<int>& ranks, std::vector<int>& stages);

// rows x cols token ids (i64) drawn uniformly from [0, vocab) by a generator seeded with
// `seed`: the benchmarks' synthetic batches (the same on every rank for the same seed).
Tensor random_token_ids(int64_t rows, int64_t cols, int64_t vocab, uint64_t seed);

// The model, optimizer and clipping of a GPT preset ("tiny", "gpt2-124m", ...) as a
// triad-train config without batch, steps or zero keys: AdamW (lr 3e-4, betas 0.9/0.95,
// weight decay 0.1), clipping 1.0, on the CPU.
nlohmann::json preset_config_json(const std::string& preset);
// The model (and optimizer, clipping) of `config` (a triad-train config file) or, when
// empty, of `preset`, with `overrides` (dotted.key=value) applied and a training run's own
// keys (batch sizes, steps, scheduler, ZeRO, outputs, checkpoints, data) replaced by one
// step of batch 1: what a benchmark builds its model from before setting its own run.
nlohmann::json model_config_json(const std::string& preset, const std::string& config,
                                 const std::vector<std::string>& overrides);
// The benchmarks time GPTs (their FLOP counts and parameter layouts are the GPT's): Error
// naming `path` for a config of another model.arch.
void require_gpt2(const engine::TrainConfig& config, const std::string& path);

// Element-wise maximum of `values` over the ranks of `world` (collective): a timing's
// slowest rank.
std::vector<double> max_over_ranks(parallel::Communicator& world, const std::vector<double>& values);

// Every worker rank must run the same options: they come from one mpirun command line, but
// a hand-made launch could differ. Compares a digest of `options` across the ranks (one
// all-reduce; call it before any other collective) and throws Error on every rank when they
// differ.
void check_ranks_agree(parallel::Communicator& world, const std::string& options, const std::string& command);

// Runs argv (argv[0] looked up on PATH) in `dir` ("" : here) with its output on ours, or
// discarded when `quiet`; returns the exit status, or -1 when it could not be started.
int run_program(const std::vector<std::string>& argv, const std::string& dir, bool quiet);

}  // namespace triad::bench
