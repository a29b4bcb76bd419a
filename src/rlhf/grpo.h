// Group relative policy optimization (DeepSeekMath, Shao et al. 2024): G answers sampled
// per prompt, each answer's advantage its reward standardized within its group; no critic.
//
// Note [GRPO]: rewards (P G,) with the G answers of a prompt consecutive:
//   adv_i = (r_i - mean_g) / (std_g + eps)
// std_g the sample standard deviation of the group (Bessel's correction, divisor G - 1:
// torch.std's default, which TRL's GRPOTrainer uses), eps 1e-4 (TRL). Each answer's
// advantage applies to all its tokens. Per token, with ratio = exp(logp - old_logp) (1 in
// value when old_logp is logp detached: one update per generation), and the k3 estimator
// of KL(policy || ref) (Schulman, "Approximating KL divergence"):
//   kl   = exp(ref - logp) - (ref - logp) - 1                      (>= 0, unbiased)
//   loss = -min(ratio adv, clamp(ratio, 1 - clip, 1 + clip) adv) + beta kl
// aggregated as a token mean over the whole batch, sum(loss * mask) / sum(mask) (TRL's
// "bnpo"/DAPO aggregation; the paper's per-sequence mean weights short answers more).
// beta 0.04 (the paper's and TRL's original default), clip 0.2.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace triad::rlhf {

// rewards (P G,) -> advantages (P G,), no gradient. Error unless group_size >= 2 divides
// the number of rewards.
Tensor grpo_advantages(const Tensor& rewards, int64_t group_size, double eps = 1e-4);

// The k3 estimator per token, differentiable in logp; logp, ref_logp (B, A).
Tensor k3_kl(const Tensor& logp, const Tensor& ref_logp);

struct GrpoLoss {
  Tensor loss;           // shape (), differentiable in logp
  Tensor kl;             // shape (): token mean of k3, without gradient
  Tensor clip_fraction;  // shape (): token mean of [the clipped term is the smaller], without gradient
};

// logp (B, A) differentiable; old_logp, ref_logp (B, A) and advantages (B,) constants;
// mask (B, A) 0/1; tokens its sum when the caller knows it (masked_mean: no read of the
// device), 0: read once.
GrpoLoss grpo_loss(const Tensor& logp, const Tensor& old_logp, const Tensor& ref_logp, const Tensor& advantages,
                   const Tensor& mask, double beta = 0.04, double clip = 0.2, double tokens = 0);

}  // namespace triad::rlhf
