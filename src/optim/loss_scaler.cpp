#include "optim/loss_scaler.h"

#include <algorithm>

#include "tensor/error.h"

namespace triad::optim {

LossScaler::LossScaler(const LossScaleConfig& config)
    : config_(config),
      scale_(config.dynamic ? config.initial_scale : config.static_scale > 0 ? config.static_scale : 1.0),
      hysteresis_left_(config.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (!config_.dynamic) return;
  if (overflow) {
    clean_steps_ = 0;
    if (hysteresis_left_ <= 1)
      scale_ = std::max(scale_ / 2.0, config_.min_scale);
    else
      --hysteresis_left_;
  } else {
    if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
    if (++clean_steps_ % config_.window == 0) hysteresis_left_ = config_.hysteresis, scale_ *= 2.0;
  }
}

void LossScaler::set_state(const State& s) {
  TRIAD_CHECK(s.scale > 0 && s.hysteresis_left >= 0 && s.clean_steps >= 0,
              "loss scaler: invalid state (scale " << s.scale << ", hysteresis " << s.hysteresis_left
                                                   << ", clean steps " << s.clean_steps << ")");
  if (config_.dynamic) scale_ = s.scale;
  hysteresis_left_ = s.hysteresis_left;
  clean_steps_ = s.clean_steps;
}

}  // namespace triad::optim
