// DeepSpeed-Chat's step 3 (PPO) and GRPO: the actor generates answers to the RL split's
// prompts on its own training Engine (the hybrid engine), a frozen reward model scores them,
// and the actor (with PPO, the critic too) learns from them against a frozen reference.
//
// Note [RL step]: step k takes the global batch of train_batch_size sequences; with GRPO
// these are train_batch_size / group_size prompts, each answered group_size times
// (consecutive rows). Prompt j of step k is the RL split's EpochOrder(k p + j) (p prompts per
// step). Data-parallel rank r (with model.tensor_parallel, every rank of its tensor-parallel
// group: StepLayout) holds the contiguous rows [r R, (r + 1) R), R = micro x accumulation, and
// generates them in one call (one gather at ZeRO-3), sample g = k B + r R + i drawing its
// tokens by (seed, g) (Note [Batched generation]): every layout makes the same samples.
// With sequence parallelism the rows are then left-padded to a multiple of the
// tensor-parallel ranks (Note [Sequence-parallel steps] in rlhf/step_run.h).
// Then, per micro-batch of the rank's rows, without gradients:
//   old_logp, ref_logp  the actor's and the reference's log-probs of the answer tokens
//                       (training forwards on the left-padded prompt + answer rows);
//   score               the reward model's value at each row's last answer token;
//   PPO: old_values     the critic's values at the positions predicting the answer tokens,
//        rewards        kl_rewards(old_logp, ref_logp, score) (kl_ctl, clip_reward_value),
//        advantages, returns = gae(old_values, rewards) (gamma, lam);
//   GRPO: advantages    grpo_advantages(score) within each group.
// All of it stays on the device until the last micro-batch's forwards are queued; then what
// the host needs is read in one wait: the rank's scores, those of its chosen answers
// (chosen_reward) and, PPO, each micro-batch's log-probs and values. The statistics, PPO's
// rewards, advantages and returns (kl_rewards, gae) and GRPO's advantages are made from
// those host copies (no micro-batch's need another's made first).
// Then ppo_epochs passes, each one optimizer step of the actor (and the critic) with the
// micro-batches accumulated: PPO's clipped actor loss (plus unsup_coef times the SFT loss on
// a micro-batch of the SFT split: ptx) and clipped critic loss (rlhf/ppo_losses.h), or
// GRPO's loss (rlhf/grpo.h). With kl_target > 0 the KL coefficient adapts after each step
// (Note [Adaptive KL]) and is saved with the checkpoints (rl_state.json in the actor's
// folder). Reported per step, in the metrics and on the progress line: the reward's mean
// and spread, the reward model's mean score of the dataset's own chosen answers to the same
// prompts (chosen_reward: samples scoring above it are exploiting the reward model), KL to
// the reference (per sequence, summed over its tokens), the policy's
// entropy, the response length, the clip fractions, the losses, generation and training
// tokens/s and the time split between generation, scoring (experience) and training. In
// pipeline stages generation and the experience run on the actor and critic gathered whole,
// and the epochs through the schedules (Note [RL in pipeline stages] in rlhf/rl_epoch.h).
#pragma once

#include <nlohmann/json.hpp>

#include "parallel/communicator.h"
#include "rlhf/rlhf_config.h"
#include "rlhf/step_run.h"

namespace triad::rlhf {

// Runs config.step ("ppo" or "grpo"). Collective over `world`. Returns the last step's
// metrics (empty when no step ran).
nlohmann::json train_rl(const StepConfig& config, const RunOptions& options, parallel::CommunicatorPtr world);

}  // namespace triad::rlhf
