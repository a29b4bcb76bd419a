// The configuration of `triad-rlhf`: one JSON file for the whole pipeline, DeepSpeed's keys
// for every model trained in it.
//
// Note [RLHF config]: the file is a triad training config (model, batch sizes, optimizer,
// scheduler, zero_optimization, precision, seed, device, ...) with a `data` section of its
// own and a section per step:
//
//   "data":   {"path": pairs.jsonl, "tokenizer": ..., "data_split": "2,4,4",
//              "max_prompt_seq_len": 16, "max_seq_len": 48, "val_fraction": 0.05}
//   "sft":    {"init": ..., "include_prompt": false, <training keys>}
//   "reward": {"init": ..., <training keys>}
//   "dpo":    {"init": ..., "beta": 0.1, <training keys>}
//   "ppo":    {"reward_model": ..., "kl_ctl": 0.1, ..., <training keys>,
//              "actor": {"init": ..., <training keys>}, "critic": {"init": ..., <training keys>}}
//   "grpo":   {"reward_model": ..., "group_size": 4, "beta": 0.04, ..., <training keys>,
//              "actor": {"init": ..., <training keys>}}
//
// A step's model trains on the top-level keys with its section's training keys merged over
// them (objects key by key), and PPO's actor and critic on their own subsections merged over
// that: e.g. "ppo": {"actor": {"optimizer": {"params": {"lr": 9.65e-6}}}} sets the actor's
// rate alone, as DeepSpeed-Chat's --actor_learning_rate does. `init` names the weights a
// model starts from (a checkpoint or weights file; weights only, the optimizer fresh at step
// 0): SFT from a pretrained model, the reward model and DPO from the SFT model (the reward
// model's body: nn/value_model.h), PPO's actor from SFT and its critic from the reward model.
// PPO's and GRPO's models keep their checkpoints in checkpoint.dir/actor and
// checkpoint.dir/critic, and leave output_dir/actor.h5 and output_dir/critic.h5. Their
// engines count optimizer steps, ppo_epochs per PPO or GRPO step: their configs' steps and
// checkpoint.every are the section's times ppo_epochs (the schedule runs over every
// optimizer step, as DeepSpeed-Chat's does; checkpoint step-N.h5 is after N optimizer steps).
// The reference model of PPO, GRPO and DPO is the actor's (policy's) init, frozen. Every key
// is validated; unknown ones are errors naming the closest known key.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "rlhf/preference_data.h"

namespace triad::rlhf {

// The data section: the preference dataset every step reads its split of (Note [Data
// split]).
struct RlhfData {
  std::string path;       // JSONL with prompt, chosen, rejected
  std::string tokenizer;  // a tokenizer file (io/tokenizer.h): triad's, a tokenizer.json or its folder
  std::string data_split = "2,4,4";
  SequenceLimits limits;
  double val_fraction = 0.05;  // of a step's examples, held out (SFT loss, reward accuracy, DPO margin)
};

// One model a step trains: its training config and the weights it starts from.
struct ModelRun {
  engine::TrainConfig train;
  std::string init;  // "" : the config's own initialization
};

// PPO's and GRPO's settings, with DeepSpeed-Chat's defaults (PPOTrainer) where it has them.
struct RlOptions {
  std::string reward_model;          // the trained reward model's weights (frozen)
  double kl_ctl = 0.1;               // β of the per-token KL reward (PPO)
  double clip_reward_value = 5.0;    // the score is clipped to ±this
  double cliprange = 0.2;            // the actor's ratio clip
  double cliprange_value = 0.2;      // the critic's value clip
  double gamma = 1.0, lam = 0.95;    // GAE
  int64_t ppo_epochs = 1;            // passes over each generation batch
  int64_t max_answer_seq_len = 0;    // generated tokens at most (0: data.max_seq_len - max_prompt_seq_len)
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;                 // 0: no limit
  bool enable_ema = false;           // keep an EMA of the actor (rlhf/actor_ema.h)
  double ema_beta = 0.992;
  double unsup_coef = 0.0;           // ptx: weight of the SFT loss on the SFT split mixed in (0: off)
  // The adaptive KL controller (Ziegler et al.; rlhf/kl_controller.h): target 0 keeps kl_ctl fixed.
  double kl_target = 0.0;
  int64_t kl_horizon = 10000;
  int64_t group_size = 4;            // GRPO: samples per prompt
  double beta = 0.04;                // GRPO: weight of the k3 KL in the loss
};

struct DpoOptions {
  double beta = 0.1;
};

struct StepConfig {
  std::string step;  // sft | reward | dpo | ppo | grpo
  RlhfData data;
  ModelRun model;    // the trained model: SFT's, the reward model, DPO's policy, PPO/GRPO's actor
  ModelRun critic;   // PPO's critic
  bool include_prompt = false;  // SFT: the loss on the prompt too
  RlOptions rl;
  DpoOptions dpo;
};

// The config of `step` for a job of `ranks` processes. Throws Error naming the key on any
// bad or unknown key, a missing data.path, data.tokenizer or init where a step needs one.
StepConfig parse_rlhf_config(const nlohmann::json& json, const std::string& step, int64_t ranks);

}  // namespace triad::rlhf
