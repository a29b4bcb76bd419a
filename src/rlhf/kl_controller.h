// The coefficient of the KL penalty in PPO's reward (rlhf/kl_reward.h): fixed, as
// DeepSpeed-Chat keeps it (kl_ctl 0.1), or adapted towards a target KL.
//
// Note [Adaptive KL]: Ziegler et al. 2019 ("Fine-Tuning Language Models from Human
// Preferences", section 2.2), as TRL's AdaptiveKLController implements it: after a batch
// of n_steps samples whose measured KL(policy || ref) is kl,
//   e = clamp(kl / target - 1, -0.2, 0.2)
//   value *= 1 + e n_steps / horizon
// so the coefficient grows while the policy drifts further than the target and shrinks
// while it stays closer, by at most a factor 1 +- 0.2 n_steps / horizon per update.
#pragma once

#include <cstdint>

namespace triad::rlhf {

class KlController {
 public:
  // A fixed coefficient: update() leaves it unchanged.
  static KlController fixed(double value);
  // Starts at init_value and adapts towards `target` over `horizon` samples. Error unless
  // init_value >= 0, target > 0 and horizon > 0.
  static KlController adaptive(double init_value, double target, double horizon);

  double value() const { return value_; }
  bool is_adaptive() const { return horizon_ > 0; }
  // After a batch of n_steps samples with measured KL `kl`. Error when n_steps < 0.
  void update(double kl, int64_t n_steps);

 private:
  KlController(double value, double target, double horizon) : value_(value), target_(target), horizon_(horizon) {}
  double value_, target_, horizon_;  // horizon_ 0: fixed
};

}  // namespace triad::rlhf
