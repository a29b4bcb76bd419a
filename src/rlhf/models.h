// The models of the RLHF steps: those trained (on an Engine, any ZeRO stage) and those held
// frozen (PPO's and DPO's reference, the reward model during PPO and GRPO).
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "nn/value_model.h"
#include "rlhf/rlhf_config.h"
#include "zero/frozen_partition.h"

namespace triad::rlhf {

// A language model to train (SFT, DPO's policy, PPO's and GRPO's actor) as run.train
// describes, from run.init's weights when given (checkpoint/checkpoint.h, load_parameters).
std::unique_ptr<engine::Engine> policy_engine(const ModelRun& run, engine::GridPtr grid);
// A value model to train (the reward model, PPO's critic): from a language model's weights
// (its body; the head drawn from the config's seed) or a value model's (all of it).
std::unique_ptr<engine::Engine> value_engine(const ModelRun& run, engine::GridPtr grid);

// The whole model an engine of policy_engine or value_engine trains in pipeline stages (the
// language model; the value model), built on this rank over the tensor-parallel group `tp`
// as the stages are, for the stages' values to be gathered into (Note [Stages gathered
// whole] in rlhf/gathered_stages.h).
std::shared_ptr<nn::LanguageModel> whole_policy(const engine::TrainConfig& c, const parallel::CommunicatorPtr& tp);
std::shared_ptr<nn::ValueModel> whole_value_model(const engine::TrainConfig& c, const parallel::CommunicatorPtr& tp);

// Whether a checkpoint or weights file holds a value model (has v_head.weight).
bool holds_value_model(const std::string& path);

// Error naming `key` (the config key that names run.init, e.g. "ppo.critic.init"), the file
// and both models when run.init holds a model of another architecture or shape than
// run.train describes (layers, heads, hidden size, vocabulary, parameter count: its weights
// would not load). Reads the file's metadata alone and communicates nothing: the loops call
// it on every rank before anything collective, so that every rank names the problem before
// one rank's failure ends the job.
void check_init_shape(const ModelRun& run, const std::string& key);

// Note [Frozen models]: the models the loops never train (PPO's and GRPO's reference and
// reward models, DPO's reference) are held in f32 on the training device, in eval mode,
// with the shape their file's own config gives. With a tensor-parallel group each rank holds
// its part, as the trained models do (a language model's logits are then this rank's
// columns: full_vocabulary, rlhf/step_run.h), with sequence parallelism when they have it
// (Note [Sequence-parallel steps] in rlhf/step_run.h). At ZeRO stage 3 over more than one
// data-parallel rank they are partitioned over those ranks too (zero/frozen_partition.h,
// Note [Frozen partition]): each rank keeps a shard, each unit is gathered for its forward
// (quantized with zero_quantized_weights) and freed after, and no gradient or optimizer
// state is ever made for them. Stages 0-2 keep them whole on every rank. A file is read
// whole on each rank before being partitioned.
struct FrozenPlacement {
  parallel::CommunicatorPtr tp;  // null or one rank: whole over tensor parallelism
  bool sequence_parallel = false;  // over tp (more than one rank)
  parallel::CommunicatorPtr dp;  // the ranks stage 3 partitions over
  zero::ZeroConfig zero;         // the trained models' zero_optimization section
};

// A frozen model and, when partitioned, what holds its shards (the model must not run a
// forward once this is gone).
template <class M>
struct Frozen {
  std::shared_ptr<M> model;
  std::unique_ptr<zero::FrozenPartition> partition;  // null: whole on every data-parallel rank

  M& operator*() const { return *model; }
  M* operator->() const { return model.get(); }
  // Parameter bytes resident on this rank between forwards (grad_bytes and optim_bytes 0).
  zero::ResidentBytes memory() const {
    zero::ResidentBytes m;
    if (partition)
      m.param_bytes = partition->resident_bytes();
    else
      for (const auto& [_, p] : model->named_parameters())
        m.param_bytes += p.numel() * int64_t(element_size(p.dtype()));
    return m;
  }
};

// A frozen language model, and a value model (Error unless the file holds one), placed as
// `where` says (Note [Frozen models]).
Frozen<nn::LanguageModel> frozen_policy(const std::string& path, Device device, const FrozenPlacement& where = {});
Frozen<nn::ValueModel> frozen_value_model(const std::string& path, Device device, const FrozenPlacement& where = {});

}  // namespace triad::rlhf
