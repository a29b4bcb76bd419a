// A language model's body with a scalar head on every token: the reward model and the critic
// of RLHF (DeepSpeed-Chat's RewardModel). The head is a linear layer of d_model inputs, one
// output and no bias, reading the final-normed hidden states (LanguageModel::hidden_states);
// the language model's own output head is held (its weights stay in checkpoints, tied to the
// token table in the GPT) but never run. Parameter names: "base." + the language model's,
// and "v_head.weight", so a reward model starts from a fine-tuned model's checkpoint by
// loading its names under "base." (engine::load_parameters, checkpoint/checkpoint.h).
//
// Under tensor parallelism every rank holds the whole head and computes the same values.
// With sequence parallelism each rank runs the head on its own columns' hidden states, and
// the values are gathered whole on every rank (Parallelism::whole_sequence); the head's
// gradient is then partial per rank and summed over them (mark_residual_layer).
#pragma once

#include <memory>

#include "nn/language_model.h"
#include "nn/layers.h"
#include "nn/parallelism.h"

namespace triad::nn {

class ValueModel : public Module {
 public:
  // d_model: the hidden size the base's hidden states have. The head is drawn from a
  // generator seeded with `seed`, uniform in ±1/sqrt(d_model) as torch's Linear (the same on
  // every rank).
  ValueModel(std::shared_ptr<LanguageModel> base, int64_t d_model, const Parallelism& parallelism,
             uint64_t seed = 0);

  // indices (B, T) -> values (B, T), one per token (in the head's dtype), whole on every rank.
  Tensor forward(const Tensor& indices) override;
  // The same for a left-padded batch (Note [Left-padded batches]); runs this module's hooks
  // as operator() does.
  Tensor forward(const Tensor& indices, const LeftPadding& padding);

  std::shared_ptr<LanguageModel> base;
  std::shared_ptr<Linear> v_head;

 private:
  std::shared_ptr<const Parallelism> par_;
  Tensor values(const Tensor& indices, const LeftPadding* padding);
};

}  // namespace triad::nn
