// Differentiable elementwise functions the RLHF losses are written with, beyond those of
// autograd/functions.h: a stable log-sigmoid, clamping, the elementwise maximum, and the
// masked mean every token-level loss reduces with. Each computes with raw ops (any device,
// f32 or f64) and records its own backward, so that the gradients at kinks follow
// PyTorch's conventions, which the reference data (tests/reference/rlhf_reference.py)
// relies on:
//   - log_sigmoid'(x) = sigmoid(-x) everywhere (at 0: 1/2);
//   - clamp passes the gradient where lo <= x <= hi (both ends included), as torch.clamp;
//   - maximum gives the gradient to the larger input and half to each on a tie, as
//     torch.maximum.
#pragma once

#include "tensor/tensor.h"

namespace triad::rlhf {

// log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)): no overflow for any finite x.
Tensor log_sigmoid(const Tensor& x);

// x clamped elementwise into [lo, hi]; lo and hi broadcast to x's shape and are constants
// (no gradient flows to them). lo <= hi is the caller's to keep.
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi);
Tensor clamp(const Tensor& x, double lo, double hi);

// The elementwise maximum of a and b (same shape).
Tensor maximum(const Tensor& a, const Tensor& b);

// sum(x * mask) / sum(mask) over all elements: mask has x's shape, holds weights (0/1 for a
// token mask) and is a constant. Throws Error naming `what` when the mask's shape differs
// or its sum is not positive (a batch with no token to learn from).
Tensor masked_mean(const Tensor& x, const Tensor& mask, const char* what);

// mask in x's dtype and on x's device, after checking that its shape is x's (Error naming
// `what` otherwise). No gradient history.
Tensor mask_like(const Tensor& mask, const Tensor& x, const char* what);

}  // namespace triad::rlhf
