// The config file's model.moe section (the GPT's and the Llama's Mixture-of-Experts blocks),
// with DeepSpeed's MoE layer argument names and defaults (deepspeed.moe.layer.MoE) and
// Megatron-DeepSpeed's placement of MoE blocks: docs/models.md lists every key.
#pragma once

#include "config/json_reader.h"
#include "nn/moe_config.h"

namespace triad::engine {

// Reads model.moe; throws Error naming the key for a bad value or an unknown key.
// expert_parallel_size goes to `expert_parallel_size`.
nn::MoEModelConfig parse_moe(JsonReader r, int64_t& expert_parallel_size);

}  // namespace triad::engine
