// Dynamic loss scaling's rule and its step on the device (Note [Loss scale on the device] in
// zero/device_loss_scale.h), written once for the host's optim::LossScaler, the CPU
// backend and the CUDA backend's one-thread kernel, so that all three move the scale the
// same way.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/host_device.h"
#include "tensor/optimizer_ops.h"

namespace triad {

// DeepSpeed's rule (optim/loss_scaler.h): a step whose gradients overflowed uses up the
// hysteresis, then halves the scale (never below min_scale); `window` clean steps double it
// and refill the hysteresis (consecutive_hysteresis: every clean step refills it). A static
// scale (dynamic false) never moves.
struct LossScaleRule {
  bool dynamic = false;
  int64_t window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
  // The gradients are unscaled by predivide / (ranks scale) (ZeRO: its
  // gradient_predivide_factor and data-parallel size).
  double predivide = 1.0, ranks = 1.0;
};

// What gradients made with loss scale `scale` are multiplied by: predivide / (ranks scale).
TRIAD_HOST_DEVICE inline double unscale_factor(const LossScaleRule& r, double scale) {
  return r.predivide / (r.ranks * scale);
}

TRIAD_HOST_DEVICE inline void advance_loss_scale(double& scale, int64_t& hysteresis_left, int64_t& clean_steps,
                                                 bool overflow, const LossScaleRule& r) {
  if (!r.dynamic) return;
  if (overflow) {
    clean_steps = 0;
    if (hysteresis_left <= 1) {
      const double half = scale / 2.0;
      scale = half > r.min_scale ? half : r.min_scale;
    } else {
      --hysteresis_left;
    }
  } else {
    if (r.consecutive_hysteresis) hysteresis_left = r.hysteresis;
    if (++clean_steps % r.window == 0) hysteresis_left = r.hysteresis, scale *= 2.0;
  }
}

// The slots of the loss scale's state on the device, f64 (integers held exactly).
enum LossScaleSlot : int64_t {
  kLossScale = 0,   // the scale the next backward seeds with
  kHysteresisLeft,  // overflows still taken before the scale halves
  kCleanSteps,      // steps since the last overflow
  kStepsTaken,      // steps not skipped: Adam's bias correction and the schedule count them
  kUnscale,         // predivide / (ranks scale): what the next step's gradients are multiplied by
  kLossScaleSlots
};
// A step's outcome (ops::loss_scale_step_), f64: its learning rate, whether it was skipped
// (1) or not (0), the scale after it.
inline constexpr int64_t kStepOutcome = 3;

// One step's verdict (ops::loss_scale_step_): the gradients overflowed when `squared`, the
// squared norm of the unscaled gradients summed over the ranks, is not finite. The row of
// `ring` for the steps taken before this one (row taken % rows; a row: the learning rate,
// then `groups` AdamWConstants<float> held as f64) becomes `constants` with their skip set
// on overflow; then the state moves (the scale, the steps taken, the next unscale) and
// `outcome` gets the learning rate, the verdict and the new scale.
TRIAD_HOST_DEVICE inline void loss_scale_step(const double* squared, double* state, const double* ring, int64_t rows,
                                              int64_t groups, float* constants, double* outcome,
                                              const LossScaleRule& r) {
  using std::isfinite;
  const bool overflow = !isfinite(*squared);
  const int64_t taken = int64_t(state[kStepsTaken]);
  const double* row = ring + (taken % rows) * (1 + groups * kAdamWConstants);
  for (int64_t i = 0; i < groups * kAdamWConstants; ++i) constants[i] = float(row[1 + i]);
  for (int64_t g = 0; g < groups; ++g) constants[g * kAdamWConstants + kAdamWSkip] = overflow ? 1.0f : 0.0f;
  double scale = state[kLossScale];
  int64_t hysteresis_left = int64_t(state[kHysteresisLeft]), clean_steps = int64_t(state[kCleanSteps]);
  advance_loss_scale(scale, hysteresis_left, clean_steps, overflow, r);
  state[kLossScale] = scale;
  state[kHysteresisLeft] = double(hysteresis_left);
  state[kCleanSteps] = double(clean_steps);
  state[kStepsTaken] = double(taken + (overflow ? 0 : 1));
  state[kUnscale] = unscale_factor(r, scale);
  outcome[0] = row[0];
  outcome[1] = overflow ? 1.0 : 0.0;
  outcome[2] = scale;
}

}  // namespace triad
