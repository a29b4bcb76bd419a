#include "nn/moe_experts.h"

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

Tensor Experts::forward(const Tensor& slots) {
  TRIAD_CHECK(slots.dim() == 3 && slots.size(0) == count(),
              "Experts: expected slots (" << count() << ", R, d), got " << shape_str(slots.shape()));
  std::vector<Tensor> outputs;
  for (int64_t e = 0; e < count(); ++e)
    outputs.push_back(unsqueeze((*children()[size_t(e)].second)(select(slots, 0, e)), 0));
  return cat(outputs, 0);
}

}  // namespace triad::nn
