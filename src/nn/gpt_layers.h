// The GPT as a list of layers (nn/layer_list.h), for pipeline parallelism: an embedding
// layer (token table tied to the head, position table, dropout), n_layer blocks, and a
// head (final LayerNorm and the tied output projection). Parameter names, initial values
// and numerics are the nn::GPT's (Note [Layer names]): a pipeline of any number of stages
// trains the same model, and the checkpoints of either load into the other.
#pragma once

#include "nn/gpt.h"
#include "nn/layer_list.h"

namespace triad::nn {

// Layer types, for partition "type:REGEX": "GPTEmbedding", "Block", "GPTHead". The tied
// module "wte" is the token table.
LayerList gpt_layers(const GPTConfig& config, std::shared_ptr<const Parallelism> parallelism = serial());

}  // namespace triad::nn
