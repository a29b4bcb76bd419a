// A value model (nn/value_model.h: the reward model and the critic) as a list of layers
// (nn/layer_list.h), for pipeline stages: its base's embedding and blocks (nn/gpt_layers.h,
// nn/llama_layers.h) under "base.", then in place of the base's output head its final norm
// ("GPTFinalNorm" holding base.ln_f, "LlamaFinalNorm" holding base.norm_f) and the value
// head ("ValueHead", v_head.weight). A Llama's untied output head is not there, as in the
// ValueModel, whose Llama base is built without it. Parameter names, initial values
// (the head drawn from `seed`, as the ValueModel draws it) and numerics are the
// ValueModel's, so either loads the other's checkpoints and a pipeline of any number of
// stages trains the same model. The last layer's output is the values (B, T), whole on every
// rank of a tensor-parallel group. The GPT's token table, used by its embedding alone, is
// the tied module "base.wte" (held by the first stage only). The list's loss is the caller's (Note
// [Pipeline losses] in engine/engine.h): its own `loss` refuses to run.
#pragma once

#include "nn/gpt.h"
#include "nn/layer_list.h"
#include "nn/llama.h"

namespace triad::nn {

LayerList gpt_value_layers(const GPTConfig& config, uint64_t seed,
                           std::shared_ptr<const Parallelism> parallelism = serial());
LayerList llama_value_layers(const LlamaConfig& config, uint64_t seed,
                             std::shared_ptr<const Parallelism> parallelism = serial());

}  // namespace triad::nn
