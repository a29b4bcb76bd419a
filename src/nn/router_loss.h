// How the router losses of Mixture-of-Experts layers (nn/moe.h) join the training loss
// without passing through the model's outputs, so that they reach the backward from any
// layer: inside a pipeline stage, inside a recomputed (activation-checkpointed) block, in
// any model that holds an MoE layer.
//
// Note [Router losses in the backward]
// A model with MoE layers trains on  L = lm_loss + sum over its MoE layers of
// loss_l  (loss_l = aux_loss_coeff l_aux + z_loss_coeff z_loss, Note [MoE auxiliary loss]).
// Each layer returns its output through attach_router_loss(out, loss_l): the identity on
// out, whose backward also sends the gradient router_loss_gradient() into loss_l. A
// backward seeded with s at lm_loss then gives s dL/dθ when router_loss_gradient() is s
// (Megatron-core's MoEAuxLossAutoScaler does the same). The trainer sets it for the
// length of its backward passes to the seed it gives the loss (RouterLossGradient: the
// loss scale over the gradient accumulation steps); it is 1 otherwise, so a plain
// backward(lm_loss) differentiates L. A layer whose output receives no gradient sends none
// into its loss either, as its loss then has no path to lm_loss.
#pragma once

#include "tensor/tensor.h"

namespace triad::nn {

// out, unchanged; in the backward, loss (a scalar) receives router_loss_gradient().
Tensor attach_router_loss(const Tensor& out, const Tensor& loss);

// A one-element tensor where the seed was made (the device, with the loss scale there:
// Note [Loss scale on the device] in zero/device_loss_scale.h); undefined: 1.
Tensor router_loss_gradient();

// Sets router_loss_gradient() for its lifetime (per thread, as grad mode is).
class RouterLossGradient {
 public:
  explicit RouterLossGradient(Tensor seed);
  ~RouterLossGradient();
  RouterLossGradient(const RouterLossGradient&) = delete;
  RouterLossGradient& operator=(const RouterLossGradient&) = delete;

 private:
  Tensor previous_;
};

}  // namespace triad::nn
