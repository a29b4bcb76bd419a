// distill_blocks: ZeroQuant's layer-by-layer distillation (layer_distillation.h).
#include "checkpoint/layer_distillation.h"

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "optim/optimizer.h"
#include "tensor/error.h"

namespace triad::engine {

namespace {

void set_fake_quantization(const nn::ModulePtr& block, const std::optional<QuantRecipe>& recipe) {
  for (const auto& [name, m] : block->named_modules(block))
    if (auto* linear = dynamic_cast<nn::Linear*>(m.get()))
      linear->use_fake_quantization(recipe ? std::optional(recipe->format(linear->weight.size(1))) : std::nullopt);
}

double mean_mse(nn::Module& block, const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets) {
  NoGradGuard no_grad;
  double total = 0;
  for (size_t b = 0; b < inputs.size(); ++b) total += distillation_mse(block(inputs[b]), targets[b]).item();
  return total / double(inputs.size());
}

}  // namespace

Tensor distillation_mse(const Tensor& student, const Tensor& teacher) {
  const Tensor d = sub(student, detach(teacher));
  return mean(mul(d, d));
}

std::vector<BlockDistillation> distill_blocks(const std::shared_ptr<nn::LanguageModel>& model,
                                              const QuantRecipe& recipe, const std::vector<Tensor>& batches,
                                              const LkdOptions& options) {
  TRIAD_CHECK(!batches.empty(), "LKD: no batches of the corpus to distil on");
  TRIAD_CHECK(options.lr > 0, "LKD: the learning rate must be positive, got " << options.lr);
  std::shared_ptr<nn::ModuleList> blocks;
  nn::Module* source = nullptr;  // the module whose output is block 0's input
  if (auto gpt = std::dynamic_pointer_cast<nn::GPT>(model)) blocks = gpt->blocks, source = gpt->drop.get();
  if (auto llama = std::dynamic_pointer_cast<nn::Llama>(model)) blocks = llama->blocks, source = llama->embed.get();
  TRIAD_CHECK(blocks, "LKD: the model is neither a GPT nor a Llama");

  // inputs[i][b]: block i's input on batch b; inputs[n] the last block's output.
  const size_t n = blocks->size();
  auto inputs = std::make_shared<std::vector<std::vector<Tensor>>>(n + 1);
  auto recording = std::make_shared<bool>(true);
  source->register_forward_output_hook([inputs, recording](nn::Module&, const Tensor& y) {
    if (*recording) (*inputs)[0].push_back(ops::clone(y));
  });
  for (size_t i = 0; i < n; ++i)
    (*blocks)[i]->register_forward_output_hook([inputs, recording, i](nn::Module&, const Tensor& y) {
      if (*recording) (*inputs)[i + 1].push_back(ops::clone(y));
    });
  const bool was_training = model->is_training();
  model->eval();
  {
    NoGradGuard no_grad;
    for (const Tensor& batch : batches) (*model)(batch);
  }
  *recording = false;

  std::vector<BlockDistillation> results;
  for (size_t i = 0; i < n; ++i) {
    const nn::ModulePtr& ptr = (*blocks)[i];
    nn::Module& block = *ptr;
    const std::vector<Tensor>&x = (*inputs)[i], &y = (*inputs)[i + 1];
    set_fake_quantization(ptr, recipe);
    BlockDistillation r{int64_t(i), mean_mse(block, x, y), 0.0, false};
    if (options.steps > 0) {
      std::vector<Tensor> before;  // the block's weights, put back when LKD does not lower its loss
      for (const Tensor& p : block.parameters()) before.push_back(ops::clone(p));
      optim::AdamWOptions o;
      o.lr = options.lr;
      optim::AdamW opt({optim::ParamGroup{block.parameters(), 0.0}}, o);
      for (int64_t s = 0; s < options.steps; ++s) {
        const size_t b = size_t(s) % x.size();
        opt.zero_grad();
        backward(distillation_mse(block(x[b]), y[b]));
        opt.step();
      }
      opt.zero_grad();
      r.mse_lkd = mean_mse(block, x, y);
      r.kept = r.mse_lkd < r.mse_ptq;
      if (!r.kept) {
        NoGradGuard no_grad;
        const std::vector<Tensor> params = block.parameters();
        for (size_t p = 0; p < params.size(); ++p) ops::copy_(params[p], before[p]);
      }
    } else {
      r.mse_lkd = r.mse_ptq;
    }
    set_fake_quantization(ptr, std::nullopt);
    results.push_back(r);
  }
  model->train(was_training);
  return results;
}

}  // namespace triad::engine
