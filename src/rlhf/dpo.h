// Direct preference optimization (Rafailov et al. 2023): the reward model folded into the
// policy, trained on preference pairs against a frozen reference.
//
// Note [DPO]: with the summed answer log-probs (rlhf/log_probs.h, sequence_log_probs) of the
// policy, pc and pr (chosen, rejected), and of the reference, rc and rr, all (B,):
//   chosen_reward   = beta (pc - rc)          rejected_reward = beta (pr - rr)
//   loss = mean over pairs of -log sigmoid(chosen_reward - rejected_reward)
// (the sigmoid loss of the paper and TRL's DPOTrainer, no label smoothing), beta 0.1.
// Reported as TRL does: the rewards (detached), accuracy = the fraction of pairs with
// chosen_reward > rejected_reward, margin = the mean of chosen_reward - rejected_reward.
#pragma once

#include "tensor/tensor.h"

namespace triad::rlhf {

struct DpoLoss {
  Tensor loss;                              // shape (), differentiable in pc and pr
  Tensor chosen_rewards, rejected_rewards;  // (B,) f64 on the host
  double accuracy = 0, margin = 0;
};

// All (B,): policy_chosen, policy_rejected differentiable; reference_* constants.
DpoLoss dpo_loss(const Tensor& policy_chosen, const Tensor& policy_rejected, const Tensor& reference_chosen,
                 const Tensor& reference_rejected, double beta = 0.1);

}  // namespace triad::rlhf
