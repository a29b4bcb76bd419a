// The experts of a Mixture-of-Experts layer: a number of modules of one kind, each run on
// its own block of slots (nn/moe.h). Any module with a single-tensor forward that keeps
// the last dimension d can be an expert; the GPT's GELU MLP and the Llama's SwiGLU are the
// usual ones. Each expert is made (and initialised) on its own, as Megatron-core does;
// DeepSpeed deep-copies one module, so its experts start equal.
#pragma once

#include <functional>

#include "nn/module.h"

namespace triad::nn {

// Makes one expert (or the residual MLP of a Residual MoE) per call.
using ExpertFactory = std::function<ModulePtr()>;
// nn::MLP, the GPT's: d -> 4d, GELU, -> d, dropout p on its output.
ExpertFactory gelu_mlp_expert(int64_t d_model, double dropout = 0.0);
// nn::SwiGLU, the Llama's: down(silu(gate(x)) * up(x)), d -> intermediate -> d.
ExpertFactory swiglu_expert(int64_t d_model, int64_t intermediate);

// The experts this process holds, named "0", "1", ... (local numbering).
class Experts : public Module {
 public:
  Experts(int64_t count, const ExpertFactory& make);
  // slots (count, R, d) -> (count, R, d): expert e on the rows slots[e]; each expert runs
  // through its operator(), so its hooks fire.
  Tensor forward(const Tensor& slots) override;

  int64_t count() const { return int64_t(children().size()); }
};

}  // namespace triad::nn
