#include "nn/moe.h"

#include "autograd/functions.h"

namespace triad::nn {

namespace {

Tensor indices(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  return ops::to(Tensor::from_vector(values, shape), device);
}

// rows (n, d) followed by a zero row n: the source of empty slots and dropped choices, so
// that dispatch and combine are single gathers (embedding is a row gather whose backward
// scatter-adds).
Tensor with_zero_row(const Tensor& rows) {
  return cat({rows, Tensor::zeros({1, rows.size(1)}, rows.dtype(), rows.device())}, 0);
}

}  // namespace

MoE::MoE(int64_t d_model, const MoEConfig& config, const ExpertFactory& make_expert,
         std::shared_ptr<const ExpertExchange> exchange, Generator& gen)
    : Module("MoE"), config(config), exchange_(std::move(exchange)) {
  config.validate();
  TRIAD_CHECK(config.num_experts % exchange_->ranks() == 0,
              "[moe] num_experts (" << config.num_experts << ") must be divisible by the expert-parallel size ("
                                    << exchange_->ranks() << ")");
  gate = register_module("gate", std::make_shared<TopKGate>(d_model, config, gen));
  // One draw from gen seeds every expert, so that the experts' weights do not depend on
  // how many of them this process holds (nn/moe_experts.h).
  const uint64_t expert_seed = random_bits(gen.state().seed, gen.advance(1));
  const int64_t count = config.num_experts / exchange_->ranks();
  experts = register_module("experts",
                            std::make_shared<Experts>(exchange_->rank() * count, count, make_expert, expert_seed));
  if (config.use_residual) {
    mlp = register_module("mlp", make_expert());
    coefficient = register_module("coefficient", std::make_shared<Linear>(d_model, 2));
  }
}

Tensor MoE::dispatch(const Tensor& tokens, const Routing& routing) const {
  const int64_t S = routing.tokens, E = routing.experts, C = routing.capacity;
  std::vector<int64_t> source(size_t(E * C), S);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < routing.k; ++j)
      if (const int64_t slot = routing.slot(s, j); slot >= 0) source[size_t(slot)] = s;
  return embedding(with_zero_row(tokens), indices(source, {E, C}, tokens.device()));
}

Tensor MoE::combine(const Tensor& outputs, const Routing& routing, const Tensor& weights) const {
  const int64_t S = routing.tokens, E = routing.experts, C = routing.capacity, K = routing.k;
  std::vector<int64_t> slot(static_cast<size_t>(S * K));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t at = routing.slot(s, j);
      slot[size_t(s * K + j)] = at >= 0 ? at : E * C;
    }
  const Tensor routed = embedding(with_zero_row(reshape(outputs, {E * C, outputs.size(-1)})),
                                  indices(slot, {S, K}, outputs.device()));  // (S, K, d)
  return sum(mul(routed, unsqueeze(weights, 2)), 1);
}

MoEOutput MoE::apply(const Tensor& x) {
  return call([&] {
    const int64_t d = gate->wg->weight.size(1);
    TRIAD_CHECK(x.dim() >= 1 && x.size(-1) == d, "MoE: expected x (..., " << d << "), got " << shape_str(x.shape()));
    const Tensor tokens = reshape(x, {-1, d});
    GateOutput g = gate->route(tokens);
    Routing& routing = g.routing;
    if (!config.drop_tokens) routing.capacity = exchange_->agree_capacity(routing.capacity);
    const Tensor slots = exchange_->to_experts(dispatch(tokens, routing));
    const Tensor outputs = exchange_->from_experts((*experts)(slots));
    Tensor out = combine(outputs, routing, g.weights);
    if (config.use_residual) {
      const Tensor c = softmax((*coefficient)(tokens));
      out = add(mul(out, narrow(c, 1, 0, 1)), mul((*mlp)(tokens), narrow(c, 1, 1, 1)));
    }
    MoEOutput r;
    r.out = reshape(out, x.shape());
    r.l_aux = g.l_aux;
    r.z_loss = g.z_loss;
    r.loss = add(mul(g.l_aux, config.aux_loss_coeff), mul(g.z_loss, config.z_loss_coeff));
    r.stats.load = routing.load;
    r.stats.capacity = routing.capacity;
    r.stats.dropped = routing.dropped();
    r.stats.dropped_fraction = double(r.stats.dropped) / double(routing.tokens * routing.k);
    return r;
  });
}

}  // namespace triad::nn
