#include "nn/moe_experts.h"

#include <typeinfo>

#include "autograd/functions.h"
#include "nn/llama_block.h"
#include "nn/transformer.h"

namespace triad::nn {

ExpertFactory gelu_mlp_expert(int64_t d_model, double dropout) {
  return [=] { return std::make_shared<MLP>(d_model, dropout); };
}

ExpertFactory swiglu_expert(int64_t d_model, int64_t intermediate) {
  return [=] { return std::make_shared<SwiGLU>(d_model, intermediate); };
}

Experts::Experts(int64_t first, int64_t count, const ExpertFactory& make, uint64_t seed)
    : Module("Experts"), first(first) {
  TRIAD_CHECK(count >= 1, "Experts: need at least one expert, got " << count);
  for (int64_t e = 0; e < count; ++e) {
    const SeededDefaultGenerator stream(random_bits(seed, uint64_t(first + e)));
    const ModulePtr expert = register_module(std::to_string(first + e), make());
    for (const auto& [name, module] : expert->named_modules(expert))
      for (auto [param, split] : module->named_splits(/*recurse=*/false)) {
        split.expert = true;
        module->set_split(param, split);
      }
  }
}

namespace {

// A layer that multiplies by its own weight: what a grouped product can stand for.
bool groupable(const Linear& l) { return typeid(l) == typeid(Linear) && l.plain() && l.weight.defined(); }

// Each expert's `layer`'s weights, and biases (empty without).
template <class Expert>
std::pair<std::vector<Tensor>, std::vector<Tensor>> layer_params(const std::vector<Expert*>& experts,
                                                                 std::shared_ptr<Linear> Expert::*layer) {
  std::vector<Tensor> weights, biases;
  for (Expert* e : experts) {
    weights.push_back((e->*layer)->weight);
    if ((e->*layer)->bias.defined()) biases.push_back((e->*layer)->bias);
  }
  return {weights, biases};
}

Tensor grouped_layer(const Tensor& x, const std::vector<int64_t>& rows,
                     const std::pair<std::vector<Tensor>, std::vector<Tensor>>& params, bool gelu = false) {
  return grouped_linear(x, rows, params.first, params.second, gelu);
}

// The experts as `Expert`s whose `layers` all run grouped; empty when any does not.
template <class Expert>
std::vector<Expert*> experts_as(const std::vector<std::pair<std::string, ModulePtr>>& children,
                                std::initializer_list<std::shared_ptr<Linear> Expert::*> layers) {
  std::vector<Expert*> experts;
  for (const auto& [name, module] : children) {
    auto* e = dynamic_cast<Expert*>(module.get());
    if (!e) return {};
    for (auto layer : layers)
      if (!groupable(*(e->*layer))) return {};
    experts.push_back(e);
  }
  // Biases on every expert or on none.
  for (auto layer : layers)
    for (Expert* e : experts)
      if ((e->*layer)->bias.defined() != (experts[0]->*layer)->bias.defined()) return {};
  return experts;
}

}  // namespace

Tensor Experts::forward_grouped(const Tensor& x, const std::vector<int64_t>& rows) {
  if (const auto mlps = experts_as<MLP>(children(), {&MLP::fc, &MLP::proj}); !mlps.empty()) {
    const Tensor h = grouped_layer(x, rows, layer_params(mlps, &MLP::fc), /*gelu=*/true);
    const Tensor y = grouped_layer(h, rows, layer_params(mlps, &MLP::proj));
    bool drops = false;
    for (MLP* e : mlps) drops = drops || (e->drop->is_training() && e->drop->p > 0.0);
    if (!drops) return y;
    // Each expert's dropout on its own rows, in the loop's order: the same draws.
    std::vector<Tensor> outputs;
    int64_t at = 0;
    for (int64_t e = 0; e < count(); ++e) {
      outputs.push_back((*mlps[size_t(e)]->drop)(narrow(y, 0, at, rows[size_t(e)])));
      at += rows[size_t(e)];
    }
    return cat(outputs, 0);
  }
  if (const auto swiglus = experts_as<SwiGLU>(children(), {&SwiGLU::gate, &SwiGLU::up, &SwiGLU::down});
      !swiglus.empty()) {
    const Tensor a = swiglu(grouped_layer(x, rows, layer_params(swiglus, &SwiGLU::gate)),
                            grouped_layer(x, rows, layer_params(swiglus, &SwiGLU::up)));
    return grouped_layer(a, rows, layer_params(swiglus, &SwiGLU::down));
  }
  return Tensor();
}

Tensor Experts::forward(const Tensor& slots) {
  TRIAD_CHECK(slots.dim() == 3 && slots.size(0) == count(),
              "Experts: expected slots (" << count() << ", R, d), got " << shape_str(slots.shape()));
  const int64_t R = slots.size(1), d = slots.size(2);
  const Tensor y = run(reshape(slots, {count() * R, d}), std::vector<int64_t>(size_t(count()), R));
  return reshape(y, {count(), R, y.size(1)});
}

Tensor Experts::forward(const Tensor& x, const std::vector<int64_t>& rows) {
  return call([&] { return run(x, rows); });
}

Tensor Experts::run(const Tensor& x, const std::vector<int64_t>& rows) {
  int64_t total = 0;
  for (const int64_t n : rows) total += n;
  TRIAD_CHECK(x.dim() == 2 && int64_t(rows.size()) == count() && total == x.size(0),
              "Experts: expected rows (R, d) and " << count() << " row counts summing to R, got "
                                                   << shape_str(x.shape()) << " and " << rows.size()
                                                   << " counts summing to " << total);
  if (grouped)
    if (Tensor y = forward_grouped(x, rows); y.defined()) return y;
  std::vector<Tensor> outputs;
  int64_t at = 0;
  for (int64_t e = 0; e < count(); ++e) {
    outputs.push_back((*children()[size_t(e)].second)(narrow(x, 0, at, rows[size_t(e)])));
    at += rows[size_t(e)];
  }
  return cat(outputs, 0);
}

}  // namespace triad::nn
