#include "nn/moe_gate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/functions.h"

namespace triad::nn {

namespace {

std::vector<double> uniform_draws(Generator& gen, int64_t n) {
  const uint64_t first = gen.advance(uint64_t(n)), seed = gen.state().seed;
  std::vector<double> u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) u[size_t(i)] = random_uniform(seed, first + uint64_t(i));
  return u;
}

// Standard Gumbel noise, -log(-log u), with u kept off 0 so that every draw is finite.
std::vector<double> gumbel_draws(Generator& gen, int64_t n) {
  std::vector<double> g = uniform_draws(gen, n);
  for (double& u : g) u = -std::log(-std::log(std::max(u, std::numeric_limits<double>::min())));
  return g;
}

// values as a tensor of `dtype` on `device`.
template <class T>
Tensor constant(const std::vector<T>& values, const Shape& shape, DType dtype, Device device) {
  return ops::to(ops::to(Tensor::from_vector(values, shape), dtype), device);
}

}  // namespace

GateOutput gate_tokens(const Tensor& logits, const MoEConfig& config, bool training, const RoutingNoise& noise) {
  config.validate();
  TRIAD_CHECK(logits.dim() == 2 && logits.size(0) >= 1 && logits.size(1) == config.num_experts,
              "MoE gate: expected logits (S >= 1, num_experts = " << config.num_experts << "), got "
                                                                  << shape_str(logits.shape()));
  const int64_t S = logits.size(0), E = config.num_experts, K = config.k;
  const DType dtype = logits.dtype();
  const Device device = logits.device();
  const Tensor probs = softmax(logits);
  GateOutput g;
  const RoutingOptions options{.k = K,
                               .capacity_factor = config.capacity_factor_for(training),
                               .min_capacity = config.min_capacity,
                               .drop_tokens = config.drop_tokens};
  g.routing = route_tokens(probs.to_vector<double>(), logits.to_vector<double>(), S, E, options, noise);
  const Routing& r = g.routing;

  // The probability of each choice's expert, gathered as rows of probs viewed (S E, 1).
  std::vector<int64_t> index(static_cast<size_t>(S * K));
  std::vector<double> kept(static_cast<size_t>(S * K));
  for (int64_t c = 0; c < S * K; ++c) {
    index[size_t(c)] = (c / K) * E + r.expert[size_t(c)];
    kept[size_t(c)] = r.location[size_t(c)] >= 0 ? 1.0 : 0.0;
  }
  const Tensor chosen = view(embedding(view(probs, {S * E, 1}), constant(index, {S, K}, DType::i64, device)), {S, K});
  g.weights = mul(chosen, constant(kept, {S, K}, dtype, device));
  if (config.renormalizes()) {
    const double eps =
        dtype == DType::f64 ? std::numeric_limits<double>::epsilon() : double(std::numeric_limits<float>::epsilon());
    // No upper bound binds (a sum of probabilities); FLT_MAX stays finite in f32.
    g.weights = div(g.weights, clamp(sum(g.weights, 1, true), eps, double(std::numeric_limits<float>::max())));
  }

  // Note [MoE auxiliary loss].
  const bool first_only = config.aux_loss == AuxLossNormalization::deepspeed && K <= 2;
  const std::vector<int64_t>& counts = first_only ? r.first_load : r.load;
  std::vector<double> ce(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) ce[size_t(e)] = double(counts[size_t(e)]) / double(S);
  const double scale = first_only ? double(E) : double(E) / double(K);
  g.l_aux = mul(sum(mul(mean(probs, 0), constant(ce, {E}, dtype, device))), scale);

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
  const int64_t n = logits.numel();
  RoutingNoise noise;
  if ((config.k == 1 && training && config.noisy_gate_policy == NoisyGatePolicy::rsample) ||
      (config.k == 2 && config.top2_2nd_expert_sampling))
    noise.logits = gumbel_draws(*gen, n);
  // Without dropping every token keeps its place: no selection to draw for.
  if (config.k == 1 && config.use_rts && config.drop_tokens) noise.priority = uniform_draws(*gen, n);
  return gate_tokens(logits, config, training, noise);
}

}  // namespace triad::nn
