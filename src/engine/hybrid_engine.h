// Generation on a training Engine (DeepSpeed-Chat's hybrid engine): the actor that PPO and
// GRPO train also generates their answers, whatever ZeRO stage holds its parameters.
//
// Note [Hybrid engine]: at ZeRO-3 each rank holds a shard of every parameter, and a training
// forward gathers each unit's parameters around its forward (Note [Stage 3 gathering]).
// Gathering so for every generated token (every layer, every step, over the data-parallel
// ranks) would cost a collective per layer per token, and would tie every rank's number of
// steps to the others': ranks with fewer prompts, or whose rows stop earlier, would hang the
// rest. Instead generate_batch gathers the whole model once (ZeroOptimizer::gather_all, the
// gather that checkpoints use), holds it while the units' hooks stand aside, generates this
// rank's own prompts with no collective at all, and releases the gathered parameters after
// (on this rank alone), also when generation throws. Ranks therefore meet only in that one
// gather: every data-parallel rank must call generate_batch once per generation round (any
// number of prompts, at least one). At ZeRO 0-2 every rank holds the whole model already:
// nothing is gathered. Sampling draws per global sample (Note [Batched generation]), so a
// rank passes the global index of its first prompt and every layout gives the same samples.
// Generation needs the whole model in memory on each rank while it runs, as DeepSpeed's does.
// A model trained with sequence parallelism generates with it paused (Note [Sequence
// parallelism paused] in nn/parallelism.h): the ranks of its tensor-parallel group pass the
// same rows and run the whole columns, as without it.
#pragma once

#include "engine/engine.h"
#include "engine/generate.h"

namespace triad::engine {

// generate_batch (engine/generate.h) with the engine's model, a language model (the GPT,
// the Llama) not split into pipeline stages; the model's training mode is kept. Error
// otherwise.
BatchGeneration generate_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                               const SamplingOptions& options, int32_t pad_token = 0, int64_t first_sample = 0);

}  // namespace triad::engine
