// What every RLHF training loop shares: its options, the checks of its layout, sums over
// ranks, the progress lines and metrics, and saving.
#pragma once

#include <chrono>
#include <exception>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"
#include "rlhf/preference_data.h"

namespace triad::rlhf {

struct RunOptions {
  std::string metrics_path;  // JSON lines, one per step ("" : none; appended to on resume)
  std::string resume;        // "" (fresh), "auto", a checkpoint file or folder (checkpoint/checkpoint_dir.h)
};

// Note [Checks on every rank]: an error every rank meets (a bad config key, bad data, a
// model file of another shape) must be named by every rank, but a rank that throws ends the
// whole job (apps/common/main_guard.h), waiting only a moment for other ranks to print
// theirs (Note [A failing rank's end] in parallel/runtime.h). So what needs no other rank is checked before anything collective, under
// check_on_every_rank: each rank runs the checks, a rank whose checks throw prints "rank R:
// error: <message>" at once, and then the ranks agree (one sum over the world); when any
// rank failed, every rank throws ChecksFailed, which triad-rlhf turns into exit status 1
// without ending the job from one rank (all stand at the same point, each failing one has
// spoken).
struct ChecksFailed : std::exception {
  const char* what() const noexcept override { return "the checks failed on a rank (each failing rank named why)"; }
};
// Collective over `world` (alone, null: runs `checks` and lets its error through).
void check_on_every_rank(const std::function<void()>& checks, const parallel::CommunicatorPtr& world);

// The layout of the reward, DPO, PPO and GRPO loops: model.tensor_parallel consecutive
// ranks split each model (parallel/process_grid.h, as triad-train lays them out) and the
// rest are data-parallel. The ranks of a tensor-parallel group take the same rows; `rank`
// and `ranks` place this rank's group among the data-parallel ones.
struct StepLayout {
  parallel::CommunicatorPtr world;  // every rank of the job (a one-process one when run alone)
  engine::GridPtr grid;              // what the engines take (engine::process_grid)
  parallel::CommunicatorPtr dp, tp;  // the grid's
  int rank = 0, ranks = 1;           // data-parallel
  bool leader = true;                // world rank 0: prints, writes the metrics
};
// Error naming the keys for a train_batch_size that is not micro x accumulation x
// data-parallel ranks.
StepLayout step_layout(const engine::TrainConfig& c, parallel::CommunicatorPtr world, const std::string& step);

// Note [Sequence-parallel steps]: with model.sequence_parallel each rank of a
// tensor-parallel group holds its part of every batch's columns in the models' residual
// streams (the trained and the frozen ones alike); every rank is given the whole batch, and
// what the losses read comes back whole on each: the logits gathered over the sequence by
// the output head (then over the vocabulary: full_vocabulary), a value model's values by
// nn::ValueModel, so log-probs, scores at the end-of-text column and losses are computed as
// without it. A batch's columns are a multiple of the ranks: SFT and reward batches are
// right-padded up to one (SequenceLimits::column_multiple), PPO's and GRPO's generated rows
// left-padded (which moves no token's position: Note [Left-padded batches]). Generation
// runs with the sequence whole on every rank (Note [Sequence parallelism paused]), so it
// samples as one process does. (Sequence parallelism without model.tensor_parallel > 1 is
// the config parser's error, for every program.)
//
// The multiple a batch's columns must be (Note [Sequence-parallel steps]): the
// tensor-parallel ranks with sequence parallelism, else 1.
int64_t column_multiple(const engine::TrainConfig& c);
// The same for the reward model's and DPO's pair batches: with pipeline stages every batch
// has data.max_seq_len columns (a pipeline agrees on one activation shape for its whole run:
// Note [Pipeline messages]); Error naming the keys when that is not a multiple of
// column_multiple(c).
int64_t pair_column_multiple(const engine::TrainConfig& c, const SequenceLimits& limits);

// Note [RLHF pipeline stages]: with pipeline.stages > 1 the reward model and DPO's policy
// train as their model's list of layers, each rank holding its stage (nn/layer_list.h; the
// reward model's list, a GPT's or a Llama's, ends in the value head: nn/value_layers.h),
// and a step's micro-batches run through the schedule with the loop's own loss on the last
// stage (Note [Pipeline losses] in engine/engine.h): each micro-batch's target is its index into the loop's
// batches, from which the loss reads what it needs (the rows' lengths and masks; DPO's
// reference log-probs, computed on the last stage, where the reference is held). What the
// loss records (the scores, the rewards) goes from the last stage to every rank of the
// pipeline (last_stage_rows). PPO's and GRPO's actor and critic train the same way; their
// generation and experience run on the models gathered whole from the stages (Note [RL in
// pipeline stages] in rlhf/rl_epoch.h).
//
// The targets the loops give a pipeline: micro-batch m's is its index m (an i64 tensor of
// one element), which target_index reads back in the loss.
std::vector<Tensor> index_targets(size_t micro_batches);
size_t target_index(const Tensor& target);

// Rows of `width` figures per micro-batch, filled on the last rank of `pp` (elsewhere the
// rows may be empty), as every rank of pp receives them (collective over pp).
std::vector<std::vector<double>> last_stage_rows(const std::vector<std::vector<double>>& rows, int64_t width,
                                                 parallel::Communicator& pp);

// A language model's logits over its whole vocabulary: split over a tensor-parallel group
// `tp`, each rank holds a slice of the vocabulary's columns, gathered here (differentiably:
// backward takes each rank's own slice); otherwise they are returned as they are.
Tensor full_vocabulary(const Tensor& logits, const parallel::CommunicatorPtr& tp);

// Element-wise sums over the ranks of `comm` (null: this process alone).
std::vector<double> sum_over(const parallel::CommunicatorPtr& comm, std::vector<double> values);

// The metrics' "mem": per named model, the bytes of its parameters, gradients and optimizer
// state resident on a rank on the training device, and those it keeps in host memory apart
// from it and in NVMe swap files ({"actor": {"param_bytes": .., "grad_bytes": ..,
// "optim_bytes": .., "host_bytes": .., "nvme_bytes": ..}, ...}), each the maximum over the
// ranks of `world` (null: this process alone). Collective over world.
nlohmann::json model_memory(const std::vector<std::pair<std::string, zero::ResidentBytes>>& models,
                            const parallel::CommunicatorPtr& world);
// model_memory's figures as one line: "resident per rank (MB of parameters/gradients/
// optimizer state): actor 0.12/0.12/0.25, reference 0.03/0/0, ...", a model's host and NVMe
// bytes after it where it has any: "actor_ema 0/0/0 (host 0, nvme 0.13)".
std::string memory_line(const nlohmann::json& mem);

// A step's progress: one line per log_interval steps (and the last) on rank 0, "step k/n |
// name value | ...", and every step's metrics as one JSON object per line.
class StepLog {
 public:
  StepLog(const std::string& metrics_path, bool leader, int64_t first_step, int64_t steps, int64_t log_interval);
  // `shown`: the metrics printed, in order (each a number in `metrics`).
  void write(int64_t step, const nlohmann::json& metrics, const std::vector<std::string>& shown);
  void print(const std::string& line) const;  // rank 0

 private:
  bool leader_;
  int64_t first_step_, steps_, log_interval_;
  std::ofstream metrics_;
  std::chrono::steady_clock::time_point start_;
};

// Resumes `engine` as `spec` says from its checkpoint folder (checkpoint/checkpoint_dir.h);
// returns the step it continues from (rank 0 says where from).
int64_t resume_engine(const std::string& spec, engine::Engine& engine, parallel::Communicator& world,
                      const std::string& what);
// A checkpoint when checkpoint.every says so or at the last step (when checkpoint.dir is
// set); returns whether it saved one.
bool maybe_checkpoint(engine::Engine& engine, parallel::Communicator& world, int64_t step, const StepLog& log);
// The trained weights as output_dir/<name>.h5 (when output_dir is set).
void save_output(engine::Engine& engine, parallel::Communicator& world, const std::string& name, const StepLog& log);

}  // namespace triad::rlhf
