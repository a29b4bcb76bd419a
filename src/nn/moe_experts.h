// The experts of a Mixture-of-Experts layer: a number of modules of one kind, each run on
// its own block of slots or rows (nn/moe.h). Any module with a single-tensor forward that keeps
// the last dimension d can be an expert; the GPT's GELU MLP and the Llama's SwiGLU are the
// usual ones. Each expert is made (and initialised) on its own, as Megatron-core does;
// DeepSpeed deep-copies one module, so its experts start equal.
//
// Note [Grouped experts]: when dropping, every expert runs on `capacity` slots, so the
// experts' products are products of one shape; dropless, each expert runs on exactly the
// rows routed to it (Note [Dropless exchange] in nn/expert_exchange.h), some on none, so
// the products differ in their rows. Either way the GELU MLP's and SwiGLU's run as grouped
// GEMMs over the experts (grouped_linear, autograd/functions.h, with a row count per
// expert): one backend call for each product of the forward and of the backward (on a GPU
// one pointer-array batched or grouped GEMM: Note [Grouped GEMM on the GPU] in
// cuda/backend/matmul.cu) where the loop made one per expert, and an expert without rows
// computes nothing (its weights' gradients are zeros). Each expert keeps its own
// parameters, their names and their gradients (a checkpoint, a Hugging Face map or ZeRO's
// partition sees no difference), and on the CPU the grouped forward and backward equal the
// loop's bit for bit. Experts of another kind, or whose layers multiply otherwise than by
// their own weight (quantized, fake-quantized, tensor-parallel), run the loop, and so does
// every expert when `grouped` is off. The grouped path runs no hooks of the experts' own
// modules (the Experts module's do).
//
// Expert e is initialised from a stream of its own, seeded from the layer's seed and e's
// global index, so that it starts with the same weights whichever process holds it, and a
// layer spread over ep processes can be compared with the one-process layer.
#pragma once

#include <functional>
#include <vector>

#include "nn/module.h"

namespace triad::nn {

// Makes one expert (or the residual MLP of a Residual MoE) per call, drawing its initial
// weights from default_generator(), which Experts seeds per expert for the call.
using ExpertFactory = std::function<ModulePtr()>;
// nn::MLP, the GPT's: d -> 4d, GELU, -> d, dropout p on its output.
ExpertFactory gelu_mlp_expert(int64_t d_model, double dropout = 0.0);
// nn::SwiGLU, the Llama's: down(silu(gate(x)) * up(x)), d -> intermediate -> d.
ExpertFactory swiglu_expert(int64_t d_model, int64_t intermediate);

// The experts this process holds, the global experts [first, first + count), named by their
// global index (first, first + 1, ...), so that a parameter's name means the same expert
// however the experts are spread; their parameters' TensorSplit says expert.
class Experts : public Module {
 public:
  // Expert first + i is made while default_generator() draws from the seed
  // random_bits(seed, first + i); the default generator's state is restored afterwards.
  Experts(int64_t first, int64_t count, const ExpertFactory& make, uint64_t seed);
  // slots (count, R, d) -> (count, R, d): expert e on the rows slots[e]; each expert runs
  // through its operator(), so its hooks fire.
  Tensor forward(const Tensor& slots) override;
  // Dropless: x (sum rows, d) -> (sum rows, d), expert e on the rows[e] rows after those of
  // the experts before it (any of them 0), through call(), so the hooks fire.
  Tensor forward(const Tensor& x, const std::vector<int64_t>& rows);

  int64_t count() const { return int64_t(children().size()); }
  const int64_t first;  // the global index of local expert 0
  bool grouped = true;  // run the experts' products as grouped GEMMs where they can (Note [Grouped experts])

 private:
  Tensor run(const Tensor& x, const std::vector<int64_t>& rows);
  Tensor forward_grouped(const Tensor& x, const std::vector<int64_t>& rows);  // undefined when they cannot
};

}  // namespace triad::nn
