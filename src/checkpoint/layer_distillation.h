// Layer-by-layer knowledge distillation (ZeroQuant's LKD, triad-compress zeroquant
// --lkd-steps): before a model's blocks are quantized, each block in turn, its linear layers
// fake-quantized (nn::Linear::use_fake_quantization), is trained to reproduce the
// full-precision block's output on the full-precision model's inputs to it. No labels; one
// block trains at a time.
#pragma once

#include <memory>
#include <vector>

#include "checkpoint/quantized_model.h"
#include "nn/language_model.h"

namespace triad::engine {

struct LkdOptions {
  int64_t steps = 0;  // AdamW steps per block, cycling over the batches
  double lr = 3e-5;   // AdamW learning rate (no weight decay); docs/compression.md: why 3e-5
};

// One block's distillation loss (distillation_mse over all batches, averaged), before LKD
// (post-training quantization alone) and after it, and whether the block keeps LKD's
// weights: only when their loss is below PTQ's. Otherwise (a learning rate too large for
// the block's quantization grid makes the loss rise) the block is put back as it was, and
// is quantized as PTQ alone quantizes it.
struct BlockDistillation {
  int64_t block = 0;
  double mse_ptq = 0, mse_lkd = 0;
  bool kept = false;
};

// mean((student - teacher)^2) over every element: the loss LKD minimises per block; the
// gradient flows to student only.
Tensor distillation_mse(const Tensor& student, const Tensor& teacher);

// Serial, on a GPT or Llama `model` in f32 (Error naming the model otherwise): records every
// block's input and output over `batches` (token ids (B, T) each) with the model as it is,
// then distils block 0, 1, ... in order under recipe.format(), leaving the trained
// full-precision weights in the model where they lower the block's loss (kept; no layer
// left fake-quantized) for save_quantized_model to quantize. The recording hooks stay registered on the model's
// embedding path and blocks, inactive. options.steps == 0 measures only. Throws Error when
// batches is empty or options.lr is not positive.
std::vector<BlockDistillation> distill_blocks(const std::shared_ptr<nn::LanguageModel>& model,
                                              const QuantRecipe& recipe, const std::vector<Tensor>& batches,
                                              const LkdOptions& options);

}  // namespace triad::engine
