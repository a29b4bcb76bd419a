// The loss scale of a mixed-precision run, as a module of its own (Megatron's grad scaler):
// what the loss is multiplied by before the backward, and how that changes after each step.
//
// Dynamic loss scaling (fp16), DeepSpeed's rule: a step whose gradients hold an inf/NaN on
// any rank is skipped, and the scale is divided by 2 once `hysteresis` such steps have been
// seen (never below min_scale); after `window` clean steps it doubles and the hysteresis is
// full again (with consecutive_hysteresis, after every clean step: only consecutive
// overflows count). A static scale (fp16.loss_scale) never changes; overflowing steps are
// still skipped. Without either (f32, bf16) the scale is 1. The optimizer that finds the
// overflow (ZeRO: zero/zero_optimizer.h) skips the step and calls update().
#pragma once

#include <cstdint>

namespace triad {
struct LossScaleRule;  // tensor/loss_scale_math.h
}

namespace triad::optim {

struct LossScaleConfig {
  bool dynamic = false;     // off: scale 1 (f32 and bf16), or static_scale
  double static_scale = 0;  // > 0 (fp16.loss_scale): this scale throughout; overflowing steps are skipped
  double initial_scale = 65536.0;
  int64_t window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleConfig& config = {});

  double scale() const { return scale_; }
  const LossScaleConfig& config() const { return config_; }
  // After a step whose gradients overflowed on some rank (or did not): moves a dynamic scale
  // (the rule, which the device runs too: tensor/loss_scale_math.h).
  void update(bool overflow);
  LossScaleRule rule() const;

  // What a checkpoint keeps. set_state checks it (Error when invalid); a static or unit
  // scale keeps its configured value, as a dynamic one's saved scale does not apply to it.
  struct State {
    double scale = 1.0;
    int hysteresis_left = 0;
    int64_t clean_steps = 0;  // steps since the last overflow
  };
  State state() const { return {scale_, hysteresis_left_, clean_steps_}; }
  void set_state(const State& s);

 private:
  LossScaleConfig config_;
  double scale_;
  int hysteresis_left_;
  int64_t clean_steps_ = 0;
};

}  // namespace triad::optim
