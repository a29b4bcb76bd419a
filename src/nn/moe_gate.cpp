#include "nn/moe_gate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/functions.h"

namespace triad::nn {

GateOutput gate_tokens(const Tensor& logits, const MoEConfig& config, bool training, const RoutingNoise& noise) {
  config.validate();
  TRIAD_CHECK(logits.dim() == 2 && logits.size(0) >= 1 && logits.size(1) == config.num_experts,
              "MoE gate: expected logits (S >= 1, num_experts = " << config.num_experts << "), got "
                                                                  << shape_str(logits.shape()));
  const int64_t S = logits.size(0), E = config.num_experts, K = config.k;
  const DType dtype = logits.dtype();
  const Tensor probs = softmax(logits);
  GateOutput g;
  const RoutingOptions options{.k = K,
                               .capacity_factor = config.capacity_factor_for(training),
                               .min_capacity = config.min_capacity,
                               .drop_tokens = config.drop_tokens};
  g.routing = route_tokens(probs, logits, options, noise);
  const Routing& r = g.routing;

  // The probability of each kept choice's expert: rows of probs viewed (S E, 1), 0 when dropped.
  g.indices = config.drop_tokens ? ops::moe_indices(r.expert, r.location, E, r.capacity)
                                 : ops::moe_indices_dropless(r.expert, r.location, r.load);
  g.weights = view(embedding(view(probs, {S * E, 1}), g.indices.choice, TableRows::zero_past_end(S * E)), {S, K});
  if (config.renormalizes()) {
    const double eps =
        dtype == DType::f64 ? std::numeric_limits<double>::epsilon() : double(std::numeric_limits<float>::epsilon());
    // No upper bound binds (a sum of probabilities); FLT_MAX stays finite in f32.
    g.weights = div(g.weights, clamp(sum(g.weights, 1, true), eps, double(std::numeric_limits<float>::max())));
  }

  // Note [MoE auxiliary loss].
  const bool first_only = config.aux_loss == AuxLossNormalization::deepspeed && K <= 2;
  const Tensor& counts = first_only ? r.first_load : r.load;
  const Tensor ce = ops::mul(ops::to(counts, dtype), 1.0 / double(S));  // a constant
  const double scale = first_only ? double(E) : double(E) / double(K);
  g.l_aux = mul(sum(mul(mean(probs, 0), ce)), scale);

  // logsumexp with the row maximum as a constant shift (its gradient is the softmax either way).
  const Tensor shift = ops::max(logits, 1, true);
  const Tensor lse = add(log(sum(exp(sub(logits, shift)), 1)), ops::squeeze(shift, 1));
  g.z_loss = mean(mul(lse, lse));
  return g;
}

TopKGate::TopKGate(int64_t d_model, const MoEConfig& config, Generator& gen)
    : Module("TopKGate"), config(config), gen(&gen) {
  config.validate();
  wg = register_module("wg", std::make_shared<Linear>(d_model, config.num_experts, false, gen));
}

GateOutput TopKGate::route(const Tensor& x) {
  TRIAD_CHECK(x.dim() == 2 && x.size(1) == wg->weight.size(1),
              "TopKGate: expected x (S, " << wg->weight.size(1) << "), got " << shape_str(x.shape()));
  const bool training = is_training();
  Tensor h = compute_dtype(x);  // routing decides in f32 whatever the activations' dtype
  if (training && config.noisy_gate_policy == NoisyGatePolicy::jitter) {
    const Tensor jitter = Tensor::empty(h.shape(), h.dtype(), h.device());
    ops::uniform_(jitter, 1.0 - 1e-2, 1.0 + 1e-2, *gen);
    h = mul(h, jitter);
  }
  const Tensor logits = linear(h, compute_dtype(wg->weight));
  const uint64_t n = uint64_t(logits.numel()), seed = gen->state().seed;
  RoutingNoise noise;
  if (training && ((config.k == 1 && config.noisy_gate_policy == NoisyGatePolicy::rsample) ||
                   (config.k == 2 && config.top2_2nd_expert_sampling)))
    noise.logit_draws = {.drawn = true, .seed = seed, .first = gen->advance(n)};
  // Without dropping every token keeps its place: no selection to draw for.
  if (config.k == 1 && config.use_rts && config.drop_tokens)
    noise.priority_draws = {.drawn = true, .seed = seed, .first = gen->advance(n)};
  return gate_tokens(logits, config, training, noise);
}

}  // namespace triad::nn
