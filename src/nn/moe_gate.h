// The router of a Mixture-of-Experts layer (DeepSpeed's TopKGate): a linear map without bias
// from d features to E logits, computed in f32 whatever the dtype of the input and the
// weight, softmax over the experts, the routing of Note [MoE routing], the combine weight
// of each kept choice, and the router's losses.
#pragma once

#include "nn/layers.h"
#include "nn/moe_config.h"
#include "nn/moe_routing.h"
#include "tensor/ops.h"

namespace triad::nn {

// Note [MoE auxiliary loss]
// With p the gate's probabilities (S, E), me_e = mean_s p_se (differentiable) and
// ce_e = (choices expert e received before capacity) / S (a constant):
// - DeepSpeed: top-1 E sum_e me_e ce_e; top-2 E^2 mean_e(me_e ce_e), the same number, both
//   with first choices only; top-k (k >= 3) E^2 / k mean_e(me_e ce_e) with all k choices.
// - Megatron (switch_load_balancing_loss_func): E / (k S^2) sum_e (sum_s p_se) load_e,
//   which is (E / k) sum_e me_e ce_e with all k choices for every k: DeepSpeed's but at
//   k = 2, where DeepSpeed counts first choices and does not divide by k.
// Either is 1 when the router is uniform and the load balanced. The router z-loss
// (ST-MoE, Megatron's z_loss_func) is mean_s logsumexp_e(logits_se)^2. The gate returns
// both unscaled; the layer scales them by aux_loss_coeff and z_loss_coeff.

struct GateOutput {
  Routing routing;
  // The routing's gather indices: at its capacity (ops::moe_indices), or dropless over the
  // routed rows grouped by expert (ops::moe_indices_dropless).
  ops::MoEIndices indices;
  Tensor weights;  // (S, k): each choice's combine weight, 0 when dropped; differentiable
  Tensor l_aux;    // (): the load-balancing loss, unscaled (DeepSpeed's l_aux)
  Tensor z_loss;   // (): the router z-loss, unscaled
};

// What the gate makes of logits (S, E) (f32, or f64): probabilities, routing, weights and
// losses. A choice's weight is its expert's probability, divided when config.renormalizes()
// (k >= 2 unless norm_topk_prob says otherwise) by the sum over the token's kept choices,
// clamped below by the dtype's epsilon as DeepSpeed does (a token with no kept choice gets
// weights 0). training picks the capacity
// factor; noise holds the draws (TopKGate::route draws them; tests give their own).
GateOutput gate_tokens(const Tensor& logits, const MoEConfig& config, bool training, const RoutingNoise& noise = {});

class TopKGate : public Module {
 public:
  // wg (d -> E, no bias) initialised from gen, which the routing's draws also come from.
  TopKGate(int64_t d_model, const MoEConfig& config, Generator& gen = default_generator());
  // x (S, d). Draws as DeepSpeed does: Jitter, RSample and second-expert sampling (top-2) in
  // training only; random token selection (top-1, when dropping) in eval mode too: turn it
  // off for a deterministic evaluation.
  GateOutput route(const Tensor& x);

  std::shared_ptr<Linear> wg;
  MoEConfig config;
  Generator* gen;
};

}  // namespace triad::nn
