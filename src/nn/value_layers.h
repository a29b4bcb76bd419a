// A GPT's value model (nn/value_model.h: the reward model and the critic) as a list of layers
// (nn/layer_list.h), for pipeline stages: the GPT's embedding and blocks (nn/gpt_layers.h)
// under "base.", then in place of its output head the final LayerNorm ("GPTFinalNorm", named
// base.ln_f) and the value head ("ValueHead", v_head.weight). Parameter names, initial values
// (the head drawn from `seed`, as the ValueModel draws it) and numerics are the
// ValueModel's, so either loads the other's checkpoints and a pipeline of any number of
// stages trains the same model. The last layer's output is the values (B, T), whole on every
// rank of a tensor-parallel group. The token table, used by the embedding alone, is the tied
// module "base.wte" (held by the first stage only). The list's loss is the caller's (Note
// [Pipeline losses] in engine/engine.h): its own `loss` refuses to run.
#pragma once

#include "nn/gpt.h"
#include "nn/layer_list.h"

namespace triad::nn {

LayerList gpt_value_layers(const GPTConfig& config, uint64_t seed,
                           std::shared_ptr<const Parallelism> parallelism = serial());

}  // namespace triad::nn
