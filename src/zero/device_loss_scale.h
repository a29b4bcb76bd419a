// The fp16 loss scale kept on the device, so that a step's overflow test makes the host wait
// for nothing (Note [Loss scale on the device]).
#pragma once

#include <cstdint>
#include <functional>

#include "optim/loss_scaler.h"
#include "tensor/loss_scale_math.h"
#include "tensor/tensor.h"

namespace triad::zero {

// Note [Loss scale on the device]: with dynamic (or static) loss scaling the host used to
// read each step's gradient norm to decide whether the update is skipped and how the scale
// moves (optim/loss_scaler.h) — a wait for the device in every step. Where ZeRO's whole
// update runs on the device, everything that verdict decides stays there:
// - The state (tensor/loss_scale_math.h's slots): the scale, the hysteresis left, the clean
//   steps, the steps taken and the factor that unscales the next step's gradients. The
//   backward's seed is made from the scale there (seed(): the plain step's, a pipeline's
//   last stage's, the router losses'), the gradients are unscaled by the factor there
//   (unscale()).
// - The verdict is one one-thread launch (ops::loss_scale_step_, optim::LossScaler's own
//   rule): overflow when the squared norm summed over the ranks is not finite (so every
//   rank reaches the same verdict), then the scale and the counters move.
// - Adam's rate, betas and bias corrections depend on the steps taken (the schedule does
//   not advance on a skipped step, as DeepSpeed's does not), which the host does not know.
//   Before each step the host writes the candidates into a ring of rows, one per number of
//   steps taken that is still possible: since the last read of the state, `unread` steps
//   were queued, so the steps taken lie in [taken at the read, that + unread]. The row of
//   t steps taken (t % the ring's rows) holds the learning rate and every group's
//   AdamWConstants of step t + 1; rows are written once, as t first becomes possible. The
//   verdict copies the row of the steps actually taken into the step's constants, with
//   kAdamWSkip set on overflow: the multi-tensor AdamW then changes nothing.
// - What the trainer reports (the step's rate, whether it was skipped, the scale after it)
//   is the verdict's outcome, a (kStepOutcome,) f64 tensor read with the step's losses.
// The host reads the state when it needs the counters (a checkpoint) and, so that the ring's
// rows stay apart, once its rows less one steps went unread (kRingRows: a read every
// thousand steps at most, where the trainer reads its steps' values at least as often). The
// arithmetic is the host path's (the same rule, the same f32 unscaling and the same
// constants), so the two paths train bit for bit alike (test_zero_mpi). Offload and the
// delayed update, whose updates run on the host, keep the host's verdict (optim::LossScaler).
class DeviceLossScale {
 public:
  static constexpr int64_t kRingRows = 1024;

  // The gradients are unscaled by predivide / (ranks scale) (ZeRO's
  // gradient_predivide_factor and data-parallel size); `groups`: rows of the step's
  // constants; `ring_rows` (>= 2): the ring's (a test's few make it wrap soon).
  DeviceLossScale(const optim::LossScaleConfig& config, double predivide, int ranks, int64_t groups, Device device,
                  int64_t ring_rows = kRingRows);

  // The backward's seed: the scale over `divisor`, () in `dtype` on the device.
  Tensor seed(double divisor, DType dtype) const;
  // Multiplies the f32 gradients by the unscaling factor (ops::mul_by_).
  void unscale(const std::vector<Tensor>& grads) const;

  // Fills `row` (groups, kAdamWConstants) f32 on the host with the constants of step t + 1
  // after t steps taken, and returns that step's learning rate.
  using RowAt = std::function<double(int64_t taken, const Tensor& row)>;
  // Before a step: writes the rows that became possible (host to device, no wait).
  void prepare(const RowAt& row_at);
  // After the step's squared gradient norm: the verdict. constants() then holds the step's
  // constants; returns its outcome (kStepOutcome,) f64.
  Tensor decide(const Tensor& squared);
  const Tensor& constants() const { return constants_; }
  // A replay of a recorded step decided on the device without decide() (Note [Recorded steps]).
  void count_replayed() { ++unread_; }

  // The host reads the state (it waits for the device), or sets it (a resumed run).
  struct Counters {
    int64_t taken;
    optim::LossScaler::State scale;
  };
  Counters read();
  void write(const Counters& c);

 private:
  LossScaleRule rule_;
  Tensor state_;            // (kLossScaleSlots,) f64
  Tensor ring_;             // (ring rows, 1 + groups kAdamWConstants) f64
  Tensor constants_;        // (groups, kAdamWConstants) f32
  int64_t read_taken_ = 0;  // the steps taken at the last read
  int64_t unread_ = 0;      // steps decided since
  int64_t written_ = 0;     // rows for taken < written_ are in the ring
};

}  // namespace triad::zero
