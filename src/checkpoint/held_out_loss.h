// The validation loss of a compressed model beside its full-precision baseline
// (triad-compress zeroquant|xtc --eval-batches): both measured on the part of the token file
// triad-train held out from training the baseline (its last data.val_fraction, io/sampler.h),
// on the same windows, so the two figures compare directly; compression trains only on the
// rest (held_out_split's train range).
#pragma once

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "io/sampler.h"
#include "io/token_file.h"
#include "nn/language_model.h"

namespace triad::engine {

struct HeldOutSplit {
  io::TokenRange train, val;  // val empty when the model's config holds nothing out (val_fraction 0)
};

// The split triad-train made of `tokens` for a model of `config` (a model file's recorded
// config; its data.val_fraction, 0.05 when absent). Throws Error naming the token file when
// the training part holds fewer than seq_len + 1 tokens.
HeldOutSplit held_out_split(const io::TokenFile& tokens, const nlohmann::json& config, int64_t seq_len);

// `count` validation batches of `rows` windows of seq_len tokens (inputs, next-token
// targets) from `split.val`, drawn as triad-train draws its validation batches (the config's
// seed + 1, batch i of `rows` rows: with rows = train_micro_batch_size_per_gpu x ranks and the
// model's seq_len they are triad-train's). Throws Error naming the token file and
// data.val_fraction when the validation part holds fewer than seq_len + 1 tokens, or when
// count or rows is not positive.
std::vector<std::pair<Tensor, Tensor>> validation_batches(const io::TokenFile& tokens, const HeldOutSplit& split,
                                                          const nlohmann::json& config, int64_t count, int64_t rows,
                                                          int64_t seq_len);

// The mean over `batches` of model.loss (next-token cross-entropy), in eval mode and without
// gradients; the model is left in the mode it was in. Throws Error when batches is empty.
double validation_loss(nn::LanguageModel& model, const std::vector<std::pair<Tensor, Tensor>>& batches);

}  // namespace triad::engine
