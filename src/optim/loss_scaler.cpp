#include "optim/loss_scaler.h"

#include "tensor/error.h"
#include "tensor/loss_scale_math.h"

namespace triad::optim {

LossScaler::LossScaler(const LossScaleConfig& config)
    : config_(config),
      scale_(config.dynamic ? config.initial_scale : config.static_scale > 0 ? config.static_scale : 1.0),
      hysteresis_left_(config.hysteresis) {}

LossScaleRule LossScaler::rule() const {
  return {.dynamic = config_.dynamic,
          .window = config_.window,
          .hysteresis = config_.hysteresis,
          .consecutive_hysteresis = config_.consecutive_hysteresis,
          .min_scale = config_.min_scale};
}

void LossScaler::update(bool overflow) {
  int64_t hysteresis_left = hysteresis_left_;
  advance_loss_scale(scale_, hysteresis_left, clean_steps_, overflow, rule());
  hysteresis_left_ = int(hysteresis_left);
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
