// The models of the RLHF steps: those trained (on an Engine, any ZeRO stage) and those held
// frozen (PPO's and DPO's reference, the reward model during PPO and GRPO).
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "nn/value_model.h"
#include "rlhf/rlhf_config.h"

namespace triad::rlhf {

// A language model to train (SFT, DPO's policy, PPO's and GRPO's actor) as run.train
// describes, from run.init's weights when given (checkpoint/checkpoint.h, load_parameters).
std::unique_ptr<engine::Engine> policy_engine(const ModelRun& run, engine::GridPtr grid);
// A value model to train (the reward model, PPO's critic): from a language model's weights
// (its body; the head drawn from the config's seed) or a value model's (all of it).
std::unique_ptr<engine::Engine> value_engine(const ModelRun& run, engine::GridPtr grid);

// Whether a checkpoint or weights file holds a value model (has v_head.weight).
bool holds_value_model(const std::string& path);

// Error naming `key` (the config key that names run.init, e.g. "ppo.critic.init"), the file
// and both models when run.init holds a model of another architecture or shape than
// run.train describes (layers, heads, hidden size, vocabulary, parameter count: its weights
// would not load). Reads the file's metadata alone and communicates nothing: the loops call
// it on every rank before anything collective, so that every rank names the problem before
// one rank's failure ends the job.
void check_init_shape(const ModelRun& run, const std::string& key);

// Frozen models in f32 on `device`, in eval mode, with the shape the file's own config
// gives: a language model, and a value model (Error unless the file holds one). With a
// tensor-parallel group `tp` each rank holds its part, as the trained models do (a language
// model's logits are then this rank's columns: full_vocabulary, rlhf/step_run.h); else whole.
std::shared_ptr<nn::LanguageModel> frozen_policy(const std::string& path, Device device,
                                                 const parallel::CommunicatorPtr& tp = nullptr);
std::shared_ptr<nn::ValueModel> frozen_value_model(const std::string& path, Device device,
                                                   const parallel::CommunicatorPtr& tp = nullptr);

}  // namespace triad::rlhf
