#include "nn/moe.h"

#include <algorithm>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "nn/router_loss.h"

namespace triad::nn {

namespace {

// The indices a gather of `rows` takes: with dropped tokens, also the one past the end,
// which reads zeros (Note [MoE gathers] in nn/moe_routing.h).
TableRows gathered(const Tensor& rows, bool drop_tokens) {
  return drop_tokens ? TableRows::zero_past_end(rows.size(0)) : TableRows{};
}

}  // namespace

std::vector<int64_t> MoEStats::loads() const { return load.to_vector<int64_t>(); }

int64_t MoEStats::dropped() const {
  int64_t d = 0;
  for (int64_t n : loads()) d += std::max<int64_t>(n - capacity, 0);  // an expert keeps min(load, capacity)
  return d;
}

double MoEStats::dropped_fraction() const { return double(dropped()) / double(choices); }

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

// An empty slot or a dropped choice reads the zero row past the end (Note [MoE gathers] in
// nn/moe_routing.h); dropless, there is none.
Tensor MoE::dispatch(const Tensor& tokens, const ops::MoEIndices& at) const {
  return embedding(tokens, at.source, gathered(tokens, config.drop_tokens));
}

Tensor MoE::combine(const Tensor& outputs, const ops::MoEIndices& at, const Tensor& weights) const {
  const Tensor rows = reshape(outputs, {-1, outputs.size(-1)});
  const Tensor routed = embedding(rows, at.slot, gathered(rows, config.drop_tokens));  // (S, K, d)
  return sum(mul(routed, unsqueeze(weights, 2)), 1);
}

MoEOutput MoE::apply(const Tensor& x) {
  return call([&] {
    const int64_t d = gate->wg->weight.size(1);
    TRIAD_CHECK(x.dim() >= 1 && x.size(-1) == d, "MoE: expected x (..., " << d << "), got " << shape_str(x.shape()));
    const Tensor tokens = reshape(x, {-1, d});
    const GateOutput g = gate->route(tokens);
    const Routing& routing = g.routing;
    Tensor outputs;
    if (config.drop_tokens) {
      outputs = exchange_->from_experts((*experts)(exchange_->to_experts(dispatch(tokens, g.indices))));
    } else {  // Note [Dropless exchange]
      const ExpertRows rows = exchange_->count_rows(routing.host_load, tokens.device());
      const Tensor received = exchange_->to_experts(dispatch(tokens, g.indices), rows);
      outputs = exchange_->from_experts(experts->forward(received, rows.per_expert()), rows);
    }
    Tensor out = combine(outputs, g.indices, g.weights);
    if (config.use_residual) {
      const Tensor c = softmax((*coefficient)(tokens));
      out = add(mul(out, narrow(c, 1, 0, 1)), mul((*mlp)(tokens), narrow(c, 1, 1, 1)));
    }
    MoEOutput r;
    r.out = reshape(out, x.shape());
    r.l_aux = g.l_aux;
    r.z_loss = g.z_loss;
    r.loss = add(mul(g.l_aux, config.aux_loss_coeff), mul(g.z_loss, config.z_loss_coeff));
    r.stats = {.load = routing.load, .capacity = routing.capacity, .choices = routing.tokens * routing.k};
    return r;
  });
}

Tensor MoE::forward(const Tensor& x) {
  MoEOutput r = apply(x);
  if (is_training() && GradMode::enabled()) {
    ++totals_.forwards;
    totals_.choices += r.stats.choices;
    routed_.push_back(r.stats);
    if (routed_.size() == kFoldEvery) fold_routed();  // bounded, when nothing takes the totals
    const Tensor losses[3] = {r.loss, r.l_aux, r.z_loss};
    for (int i = 0; i < 3; ++i)
      loss_sums_[i] = loss_sums_[i].defined() ? ops::add(loss_sums_[i], detach(losses[i])) : detach(losses[i]);
  }
  return attach_router_loss(r.out, r.loss);
}

std::vector<std::pair<std::string, Shape>> moe_parameter_shapes(const MoEConfig& layer, int64_t d_model,
                                                                const std::vector<std::pair<std::string, Shape>>& expert) {
  std::vector<std::pair<std::string, Shape>> shapes{{"gate.wg.weight", Shape{layer.num_experts, d_model}}};
  for (int64_t e = 0; e < layer.num_experts; ++e)
    for (const auto& [name, shape] : expert) shapes.emplace_back("experts." + std::to_string(e) + "." + name, shape);
  if (layer.use_residual) {
    for (const auto& [name, shape] : expert) shapes.emplace_back("mlp." + name, shape);
    shapes.emplace_back("coefficient.weight", Shape{2, d_model});
    shapes.emplace_back("coefficient.bias", Shape{2});
  }
  return shapes;
}

std::shared_ptr<MoE> block_moe(const MoEModelConfig& config, int64_t block, int64_t d_model,
                               const ExpertFactory& make_expert, uint64_t seed,
                               std::shared_ptr<const ExpertExchange> exchange) {
  const MoEConfig layer = config.at(block);
  if (layer.num_experts == 0) return nullptr;
  constexpr uint64_t kMoEStream = 0x4d6f45;  // the streams of MoE layers, apart from the model's other draws
  const SeededDefaultGenerator stream(random_bits(seed ^ kMoEStream, uint64_t(block)));
  return std::make_shared<MoE>(d_model, layer, make_expert, std::move(exchange), default_generator());
}

void MoE::fold_routed() {
  if (routed_.empty()) return;
  std::vector<Tensor> loads;  // one read of every forward's loads
  for (const MoEStats& s : routed_) loads.push_back(s.load);
  const std::vector<int64_t> all = cat(loads, 0).to_vector<int64_t>();
  const size_t E = all.size() / routed_.size();
  if (totals_.load.empty()) totals_.load.assign(E, 0);
  for (size_t f = 0; f < routed_.size(); ++f)
    for (size_t e = 0; e < E; ++e) {
      const int64_t n = all[f * E + e];
      totals_.load[e] += n;
      totals_.dropped += std::max<int64_t>(n - routed_[f].capacity, 0);
    }
  routed_.clear();
}

MoETotals MoE::take_totals() {
  fold_routed();
  MoETotals t = std::move(totals_);
  totals_ = MoETotals{};
  double* sums[3] = {&t.loss, &t.l_aux, &t.z_loss};
  for (int i = 0; i < 3; ++i)
    if (loss_sums_[i].defined()) {
      *sums[i] = loss_sums_[i].item();
      loss_sums_[i] = Tensor();
    }
  return t;
}

}  // namespace triad::nn
