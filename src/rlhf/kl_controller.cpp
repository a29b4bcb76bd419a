#include "rlhf/kl_controller.h"

#include <algorithm>

#include "tensor/error.h"

namespace triad::rlhf {

KlController KlController::fixed(double value) {
  TRIAD_CHECK(value >= 0, "KL controller: the coefficient must be >= 0, got " << value);
  return KlController(value, 0, 0);
}

KlController KlController::adaptive(double init_value, double target, double horizon) {
  TRIAD_CHECK(init_value >= 0 && target > 0 && horizon > 0,
              "KL controller: adaptive needs init_value >= 0, target > 0 and horizon > 0, got "
                  << init_value << ", " << target << " and " << horizon);
  return KlController(init_value, target, horizon);
}

void KlController::update(double kl, int64_t n_steps) {
  TRIAD_CHECK(n_steps >= 0, "KL controller: n_steps must be >= 0, got " << n_steps);
  if (!is_adaptive()) return;
  const double error = std::clamp(kl / target_ - 1.0, -0.2, 0.2);
  value_ *= 1.0 + error * double(n_steps) / horizon_;
}

}  // namespace triad::rlhf
