// The Llama as a list of layers (nn/layer_list.h), for pipeline parallelism and the
// Engine: an embedding layer, n_layer blocks, and a head (final RMSNorm and the untied
// output projection). Parameter names, initial values and numerics are nn::Llama's (Note
// [Layer names]): a pipeline of any number of stages trains the same model, and the
// checkpoints of either load into the other. Nothing is tied.
#pragma once

#include "nn/layer_list.h"
#include "nn/llama.h"

namespace triad::nn {

// Layer types, for partition "type:REGEX": "LlamaEmbedding", "LlamaBlock", "LlamaHead".
LayerList llama_layers(const LlamaConfig& config, std::shared_ptr<const Parallelism> parallelism = serial());

}  // namespace triad::nn
