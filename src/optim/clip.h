// Global-norm gradient clipping, the one rule every optimizer path uses: SGD in one
// process (clip_grad_norm) and ZeRO over a process grid (zero/zero_optimizer.h), which sums
// its ranks' squares on the device (ops::squared_norm, ops::clip_to_norm_) and applies the
// same coefficient. An inf or NaN in any gradient makes the norm non-finite: the overflow
// test of dynamic loss scaling (optim/loss_scaler.h).
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace triad::optim {

// The factor gradients of norm `norm` are multiplied by to clip them to max_norm:
// max_norm / (norm + 1e-6) when that is below 1 (PyTorch's rule), else 1; max_norm 0: off (1).
double clip_coefficient(double norm, double max_norm);
// Multiplies every gradient by clip_coefficient(norm, max_norm) when that is below 1.
void clip_grads(const std::vector<Tensor>& grads, double norm, double max_norm);

// One process: the norm of the gradients of `params` (those that have one).
double grad_norm(const std::vector<Tensor>& params);
// One process: clips the gradients of `params` to max_norm (> 0); returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace triad::optim
