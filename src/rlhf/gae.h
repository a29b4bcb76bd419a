// Generalized advantage estimation (Schulman et al. 2016) over the answer tokens, as
// DeepSpeed-Chat's get_advantages_and_returns (adopted from trlx) computes it.
//
// Note [GAE]: with values V and rewards r (B, A) over the answer positions and mask (B, A),
// positions where mask = 0 count as value 0 and reward 0 (DeepSpeed-Chat zeroes both after
// the end of each answer before the recursion). Backwards from t = A - 1:
//   delta_t = r_t + gamma V_{t+1} - V_t          (V_A = 0)
//   A_t     = delta_t + gamma lambda A_{t+1}     (A_A = 0)
//   R_t     = A_t + V_t                          (returns, the critic's targets)
// Defaults gamma = 1, lambda = 0.95 (DeepSpeed-Chat). No advantage whitening. No gradient.
#pragma once

#include "tensor/tensor.h"

namespace triad::rlhf {

struct AdvantagesReturns {
  Tensor advantages, returns;  // (B, A), in values' dtype and on its device
};

// values, rewards (B, A); mask (B, A) of 0/1.
AdvantagesReturns gae(const Tensor& values, const Tensor& rewards, const Tensor& mask, double gamma = 1.0,
                      double lambda = 0.95);

}  // namespace triad::rlhf
