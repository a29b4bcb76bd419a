// PPO's clipped losses for the actor (policy) and the critic (value function), as
// DeepSpeed-Chat's actor_loss_fn and critic_loss_fn compute them.
//
// Note [PPO losses]: over the answer positions (B, A) with mask (B, A); every mean below is
// a token mean over the whole batch, sum(x * mask) / sum(mask) (not a mean of per-sequence
// means):
//   actor:  log_ratio = (logp - old_logp) * mask,  ratio = exp(log_ratio)
//           loss = mean(max(-adv ratio, -adv clamp(ratio, 1 - clip, 1 + clip)))
//   critic: v_clip = clamp(v, old_v - clip, old_v + clip)
//           loss = 0.5 mean(max((v - R)^2, (v_clip - R)^2))
// clip 0.2 for both (cliprange, cliprange_value). Reported alongside (TRL's PPO trainer
// defines them so; DeepSpeed-Chat reports none):
//   actor clip_fraction = mean([-adv clamp(ratio) > -adv ratio]): tokens whose gradient the
//     clip removes; approx_kl = 0.5 mean(log_ratio^2);
//   critic clip_fraction = mean([(v_clip - R)^2 > (v - R)^2]).
// adv, old_logp, old_v and R are constants (no gradient flows to them). The reported figures
// are tensors of shape () on the loss's device, without gradient: computing them waits for
// nothing, and a caller reads them when it reports (a read waits for the device).
#pragma once

#include "tensor/tensor.h"

namespace triad::rlhf {

struct ActorLoss {
  Tensor loss;                      // shape (), differentiable in logp
  Tensor clip_fraction, approx_kl;  // shape ()
};

struct CriticLoss {
  Tensor loss;           // shape (), differentiable in values
  Tensor clip_fraction;  // shape ()
};

// All (B, A): logp differentiable, old_logp and advantages constants, mask 0/1.
// tokens: sum(mask) when the caller knows it (masked_mean: no read of the device); 0: read once.
ActorLoss ppo_actor_loss(const Tensor& logp, const Tensor& old_logp, const Tensor& advantages, const Tensor& mask,
                         double clip = 0.2, double tokens = 0);
// All (B, A): values differentiable, old_values and returns constants, mask 0/1.
CriticLoss ppo_critic_loss(const Tensor& values, const Tensor& old_values, const Tensor& returns, const Tensor& mask,
                           double clip = 0.2, double tokens = 0);

}  // namespace triad::rlhf
