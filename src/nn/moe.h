// A Mixture-of-Experts layer with DeepSpeed's `MoE` semantics (deepspeed/moe/layer.py,
// sharded_moe.py): a top-k gate (nn/moe_gate.h) routes each token to k of E experts
// (nn/moe_experts.h) of bounded capacity (Note [MoE routing]); a token's output is the sum
// over its kept choices of the gate weight times the expert's output, and 0 from the
// experts when all its choices are dropped. Optionally a Residual MoE (arXiv 2201.05596):
// a dense MLP beside the experts, mixed in by a learned 2-way softmax,
//   out = moe(x) c0 + mlp(x) c1,  c = softmax(coefficient(x)), coefficient: d -> 2.
// Usable in any model: it maps (..., d) to (..., d) token by token. The router's losses
// come back with the output (MoEOutput::loss), for the model to add to its training loss.
//
// The forward is dispatch -> experts -> combine; expert parallelism plugs in between the
// stages through an ExpertExchange (Note [Expert parallelism] in nn/expert_exchange.h).
#pragma once

#include "nn/expert_exchange.h"
#include "nn/moe_experts.h"
#include "nn/moe_gate.h"

namespace triad::nn {

// What a forward reports for metrics.
struct MoEStats {
  std::vector<int64_t> load;    // (E): choices routed to each expert before capacity (DeepSpeed's exp_counts)
  int64_t capacity = 0;         // slots per expert
  int64_t dropped = 0;          // choices dropped for capacity
  double dropped_fraction = 0;  // dropped / (tokens k): for top-1, the share of tokens dropped
};

struct MoEOutput {
  Tensor out;     // x's shape
  Tensor loss;    // (): aux_loss_coeff l_aux + z_loss_coeff z_loss, to add to the training loss
  Tensor l_aux;   // (): the load-balancing loss, unscaled (Note [MoE auxiliary loss])
  Tensor z_loss;  // (): the router z-loss, unscaled
  MoEStats stats;
};

class MoE : public Module {
 public:
  // make_expert makes each of this process's num_experts / exchange->ranks() experts and,
  // with use_residual, the dense MLP. gen: the gate's initialisation and draws, and the seed
  // of the experts' streams (nn/moe_experts.h). Processes given generators in the same
  // state build the same gate and, between them, the same experts.
  MoE(int64_t d_model, const MoEConfig& config, const ExpertFactory& make_expert,
      std::shared_ptr<const ExpertExchange> exchange = local_experts(), Generator& gen = default_generator());

  // x (..., d). The entry point (it runs the hooks); there is no single-tensor forward, so
  // that the losses cannot be dropped by accident.
  MoEOutput apply(const Tensor& x);

  // The stages, for the exchange and for tests. tokens (S, d) -> slots (E, C, d), a
  // slot holding its token or zeros when empty.
  Tensor dispatch(const Tensor& tokens, const Routing& routing) const;
  // The experts' outputs (E, C, d) -> tokens (S, d): the sum over each token's kept choices
  // of weights (S, k) times its slot's output.
  Tensor combine(const Tensor& outputs, const Routing& routing, const Tensor& weights) const;

  const MoEConfig config;
  std::shared_ptr<TopKGate> gate;
  std::shared_ptr<Experts> experts;
  ModulePtr mlp;                        // use_residual only
  std::shared_ptr<Linear> coefficient;  // use_residual only: d -> 2, with bias

 private:
  std::shared_ptr<const ExpertExchange> exchange_;
};

}  // namespace triad::nn
