// The per-token reward of PPO in RLHF (DeepSpeed-Chat step 3): a KL penalty against the
// frozen reference model at every answer token, plus the reward model's clipped score at
// the last one.
//
// Note [KL-shaped reward]: over the answer positions (B, A) of the log-prob frame (position
// t holds the log-prob of answer token t), with mask (B, A) = 1 on the answer's tokens:
//   reward[b, t] = -kl_coef (logp[b, t] - ref_logp[b, t])          where mask = 1
//   reward[b, e_b] += clamp(score[b], -clip, clip)                  e_b = last t with mask 1
//   reward[b, t] = 0                                                where mask = 0
// DeepSpeed-Chat's compute_rewards (kl_ctl 0.1, clip_reward_value 5) differs in one place:
// it adds the score at start + n_b, n_b = the answer's non-pad tokens, which is one past the
// last answer token (the position predicting the first pad), clipped to the last position
// when the answer fills the sequence; train_rlhf then zeroes rewards and values after that
// position, and its losses mask that position out, so the score reaches the answer only
// through GAE. Here the score sits on the last answer token itself, as TRL and OpenRLHF
// place it (on the end-of-sequence token, which the answer's mask includes).
#pragma once

#include "tensor/tensor.h"

namespace triad::rlhf {

// logp, ref_logp (B, A); score (B,); mask (B, A) of 0/1 with at least one 1 per row (Error
// naming the row otherwise). No gradient: the result is a constant in logp's dtype and on
// its device.
Tensor kl_rewards(const Tensor& logp, const Tensor& ref_logp, const Tensor& score, const Tensor& mask,
                  double kl_coef = 0.1, double clip = 5.0);

}  // namespace triad::rlhf
