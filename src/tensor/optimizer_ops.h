// The optimizer updates of many parameters at once (ops::adamw_ over a list, ops::sgd_):
// what optim/ and zero/ call, one backend call per list, which the CUDA backend runs as one
// launch (Note [Multi-tensor optimizer] in cuda/backend/multi_tensor_kernels.cuh).
#pragma once

#include <vector>

#include "tensor/ops.h"

namespace triad {

// Note [Adam's constants in memory]: an update recorded once and replayed (a CUDA graph of
// a training step, Note [Recorded steps] in engine/step_recording.h) cannot take the step's
// learning rate and bias corrections as launch arguments, which a replay repeats. It reads
// them from memory instead: AdamWTensors::constants, the AdamWConstants<float>
// (tensor/optimizer_math.h) of the step as adamw_constants() writes them on the host, copied
// to the device before each replay. The constants are those the host would compute from
// `step`, so the update is the same bit for bit.
inline constexpr int64_t kAdamWConstants = 8;  // f32 values of AdamWTensors::constants
// The last of them: not 0 skips the update (a step whose gradients overflowed, Note [Loss
// scale on the device] in zero/device_loss_scale.h).
inline constexpr int64_t kAdamWSkip = 7;

struct LossScaleRule;  // tensor/loss_scale_math.h

// One parameter's Adam update (ops::adamw_).
struct AdamWTensors {
  Tensor param, grad, exp_avg, exp_avg_sq;
  Tensor param_copy;  // undefined: none
  AdamWStep step;
  // When defined: (kAdamWConstants,) f32, contiguous, on param's device, read by the update
  // in place of `step` (Note [Adam's constants in memory]); f32 parameters only.
  Tensor constants = Tensor();
};

// Hyper-parameters of one SGD update (ops::sgd_).
struct SGDStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov = false;
};

// One parameter's SGD update.
struct SGDTensors {
  Tensor param, grad;
  Tensor momentum_buffer;  // undefined: no momentum
  bool first = false;      // the buffer's first step: it starts as the gradient (its contents unread)
};

}  // namespace triad

namespace triad::ops {

// The updates of many parameters, each as the one-parameter adamw_ (tensor/ops.h) with its
// own step, all on one device: one backend call. Parameters of no element are skipped.
void adamw_(const std::vector<AdamWTensors>& updates);
// `step`'s constants as AdamWTensors::constants holds them, written into `out`
// (kAdamWConstants contiguous f32 values on the host).
void adamw_constants(const AdamWStep& step, const Tensor& out);
// In-place SGD on many parameters of one device (PyTorch's arithmetic, in this order):
//   d = g + wd p;  buf = momentum buf + (1 - dampening) d (the first step: buf = d);
//   d = buf, or with nesterov d + momentum buf;  p -= lr d.
// param, grad and momentum_buffer: f32 or f64, one shape and dtype, param and buffer
// contiguous. One backend call.
void sgd_(const std::vector<SGDTensors>& updates, const SGDStep& step);

// The gradient norm kept on the device (Note [Host synchronisation in a step] in
// train/trainer.cpp): the sum of squares of every element of the tensors (floating, one
// device), as sum_squares (tensor/ops.h) adds them, in a one-element f64 tensor on their
// device, which the host reads only when it asks (item()).
Tensor squared_norm(const std::vector<Tensor>& tensors, Device device);
// Multiplies the f32 gradients (contiguous, on squared's device) by max_norm / (norm + 1e-6)
// when that is below 1, norm = sqrt(squared[0]) (optim::clip_coefficient's rule, max_norm
// > 0), reading squared where it is.
void clip_to_norm_(const std::vector<Tensor>& grads, const Tensor& squared, double max_norm);
// Multiplies the f32 tensors (contiguous, on factor's device) by factor[0], an f64 element
// read where it is, rounded to f32 as mul_ rounds its scalar: the loss scale's unscaling
// with the scale on the device (Note [Loss scale on the device] in zero/device_loss_scale.h).
void mul_by_(const std::vector<Tensor>& tensors, const Tensor& factor);

// One step's loss-scale verdict on the device (tensor/loss_scale_math.h's loss_scale_step),
// one launch: squared (1,) f64, the squared gradient norm; state (kLossScaleSlots,) f64,
// moved; ring (rows, 1 + groups kAdamWConstants) f64, the candidate rates; constants
// (groups, kAdamWConstants) f32 and outcome (kStepOutcome,) f64, written. All contiguous on
// one device; nothing makes the host wait.
void loss_scale_step_(const Tensor& squared, const Tensor& state, const Tensor& ring, const Tensor& constants,
                      const Tensor& outcome, const LossScaleRule& rule);

}  // namespace triad::ops
