// The model a config's `model` section describes, by model.arch: "gpt2" (nn::GPT, the
// GPTConfig in TrainConfig::model) or "llama" (nn::Llama, TrainConfig::llama). The Engine,
// checkpoints, generation and the trainer's report reach the model through these, so
// nothing else needs to know which architecture it is.
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "nn/language_model.h"
#include "nn/layer_list.h"
#include "nn/parallelism.h"

namespace triad::engine {

// What every architecture has, for reports and checks.
struct ModelShape {
  int64_t n_layer = 0, n_head = 0, n_kv_head = 0, d_model = 0, seq_len = 0, vocab_size = 0;
  int64_t parameters = 0;  // the model's (the config's num_parameters())
  std::string summary;     // e.g. "L2 C64 NH4 T64 V256" (llama: with NKV and I)
};
ModelShape model_shape(const TrainConfig& config);

// The whole model, this rank's part of it with a tensor-parallel `parallelism`.
std::shared_ptr<nn::LanguageModel> build_model(const TrainConfig& config,
                                               std::shared_ptr<const nn::Parallelism> parallelism = nn::serial());
// The same model as a list of layers (nn/gpt_layers.h, nn/llama_layers.h), for pipeline
// stages.
nn::LayerList model_layers(const TrainConfig& config,
                           std::shared_ptr<const nn::Parallelism> parallelism = nn::serial());
// A value model's base (nn::ValueModel reads its hidden states alone): the GPT (whose output
// head is its token table), the Llama without its untied output head.
std::shared_ptr<nn::LanguageModel> build_value_base(const TrainConfig& config,
                                                    std::shared_ptr<const nn::Parallelism> parallelism = nn::serial());
// The value model over that base as a list of layers (nn/value_layers.h; its value head
// drawn from `seed`), for pipeline stages.
nn::LayerList value_model_layers(const TrainConfig& config, uint64_t seed,
                                 std::shared_ptr<const nn::Parallelism> parallelism = nn::serial());

}  // namespace triad::engine
