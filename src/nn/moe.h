// A Mixture-of-Experts layer with DeepSpeed's `MoE` semantics (deepspeed/moe/layer.py,
// sharded_moe.py): a top-k gate (nn/moe_gate.h) routes each token to k of E experts
// (nn/moe_experts.h) of bounded capacity (Note [MoE routing]); a token's output is the sum
// over its kept choices of the gate weight times the expert's output, and 0 from the
// experts when all its choices are dropped. Optionally a Residual MoE (arXiv 2201.05596):
// a dense MLP beside the experts, mixed in by a learned 2-way softmax,
//   out = moe(x) c0 + mlp(x) c1,  c = softmax(coefficient(x)), coefficient: d -> 2.
// Usable in any model: it maps (..., d) to (..., d) token by token. The router's losses
// come back with the output of apply() (MoEOutput::loss), or ride on the output of forward()
// into the backward (Note [Router losses in the backward], nn/router_loss.h), which is how
// the GPT and the Llama use it.
//
// The forward is dispatch -> experts -> combine; expert parallelism plugs in between the
// stages through an ExpertExchange (Note [Expert parallelism] in nn/expert_exchange.h).
// Dropless, each expert runs on exactly the rows routed to it, on any number of ranks, with
// no padding (Note [Dropless exchange]).
#pragma once

#include "nn/expert_exchange.h"
#include "nn/moe_experts.h"
#include "nn/moe_gate.h"
#include "tensor/ops.h"

namespace triad::nn {

// What a forward reports for metrics: the loads stay on the device until read.
struct MoEStats {
  Tensor load;               // (E) i64: choices routed to each expert before capacity (DeepSpeed's exp_counts)
  int64_t capacity = 0;      // slots per expert (dropless: the largest load on this rank)
  int64_t choices = 0;       // tokens k
  // What the host reads back (a device sync).
  std::vector<int64_t> loads() const;
  int64_t dropped() const;          // choices dropped for capacity
  double dropped_fraction() const;  // dropped / (tokens k): for top-1, the share of tokens dropped
};

// What the training forwards of a layer routed since the last take_totals(), for metrics.
// Counted in forwards that record a graph, so that a block that activation checkpointing
// recomputes counts once (its first pass records none).
struct MoETotals {
  int64_t forwards = 0;
  double loss = 0, l_aux = 0, z_loss = 0;  // sums over the forwards
  int64_t dropped = 0, choices = 0;        // dropped choices, of all the tokens' k choices
  std::vector<int64_t> load;               // (E): choices routed to each expert, summed
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

  // x (..., d). The entry point (it runs the hooks) when the caller takes the losses itself.
  MoEOutput apply(const Tensor& x);
  // x (..., d) -> apply(x).out, its router loss attached for the backward (nn/router_loss.h);
  // a training forward that records a graph adds its figures to the totals.
  Tensor forward(const Tensor& x) override;
  // The totals since the previous call (Tensor::item() reads the losses: a device sync).
  MoETotals take_totals();

  // The stages, for the exchange and for tests, through the gather indices of a routing
  // (GateOutput::indices). tokens (S, d) -> slots (E, C, d), a slot holding its token or
  // zeros when empty; dropless, the routed rows (S k, d) grouped by expert (Note [Dropless
  // exchange] in nn/expert_exchange.h).
  Tensor dispatch(const Tensor& tokens, const ops::MoEIndices& at) const;
  // The experts' outputs (E, C, d), or dropless (S k, d), -> tokens (S, d): the sum over
  // each token's kept choices of weights (S, k) times its slot's (row's) output.
  Tensor combine(const Tensor& outputs, const ops::MoEIndices& at, const Tensor& weights) const;

  const MoEConfig config;
  std::shared_ptr<TopKGate> gate;
  std::shared_ptr<Experts> experts;
  ModulePtr mlp;                        // use_residual only
  std::shared_ptr<Linear> coefficient;  // use_residual only: d -> 2, with bias

 private:
  std::shared_ptr<const ExpertExchange> exchange_;
  MoETotals totals_;            // the counts known on the host
  // The training forwards' loads, kept on the device and read (a sync) by take_totals() or
  // every kFoldEvery forwards into totals_.
  static constexpr size_t kFoldEvery = 256;
  void fold_routed();
  std::vector<MoEStats> routed_;
  Tensor loss_sums_[3];  // loss, l_aux, z_loss summed on the device until take_totals()
};

// The parameters of an MoE layer of `layer`'s options over d features, in the layer's order
// (names below the layer's), given those of one expert (e.g. {"fc.weight", {4d, d}}, ...):
// gate.wg.weight (E, d), experts.{e}.<expert's> for every expert e, and with use_residual
// mlp.<expert's>, coefficient.weight (2, d), coefficient.bias (2).
std::vector<std::pair<std::string, Shape>> moe_parameter_shapes(const MoEConfig& layer, int64_t d_model,
                                                                const std::vector<std::pair<std::string, Shape>>& expert);

// The MoE layer of block `block` of a model (GPT, Llama), or null when that block is dense
// (MoEModelConfig::at), its experts spread over `exchange`. Its gate and experts are drawn
// from a stream of their own, of (seed, block), so that a pipeline stage holding the block
// builds the same layer as the whole model does; in training its draws (random token
// selection, noise) come from the default generator.
std::shared_ptr<MoE> block_moe(const MoEModelConfig& config, int64_t block, int64_t d_model,
                               const ExpertFactory& make_expert, uint64_t seed,
                               std::shared_ptr<const ExpertExchange> exchange = local_experts());

}  // namespace triad::nn
