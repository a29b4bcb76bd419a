// Text generation from a language model (nn/language_model.h: the GPT, the Llama): sampling with temperature, top-k and top-p (nucleus), one
// token at a time over the model's KV cache, so each new token costs one position of
// compute instead of the whole sequence again.
//
// Note [Batched generation]: generate_batch continues B prompts at once, as DeepSpeed-Chat's
// step 3 does: the prompts are left-padded to a common width P (Note [Left-padded batches]
// in nn/language_model.h), fed through the cache in one chunk, and every step appends one
// column to every row. A row that emits stop_token is finished: its later columns hold
// pad_token, masked out (answer_mask 0), while the batch goes on until every row has stopped
// or max_new_tokens columns are made. Sample i of step s draws u = random_uniform(
// random_bits(seed, first_sample + i), s), counter-based: global sample g gets the same draws
// whatever batch, rank or data-parallel layout generates it. logprobs holds, for each
// generated token, log-softmax of the model's raw logits (temperature 1, before top-k and
// top-p) at that token: the log-probability under the policy itself that PPO's old_logp and
// a recomputation by the training forward on the whole left-padded row both give. Each step
// samples on the model's device (ops::sample_tokens_, Note [Token sampling] in
// tensor/sampling.h): the next tokens feed the next forward where they are, and on a GPU the
// host reads only whether every row has stopped, every few steps.
//
// Note [Decode graphs]: a decode step (one column for every row: the forward of the tokens
// just sampled over the cache, then the next sampling) is many small kernels, and on a GPU
// launching them costs more than running them. So generate_batch makes the step's every
// launch the same from one column to the next: what changes per column lives in device
// memory (Note [Positions on the device] in tensor/ops.h) — a counter tensor holding the
// cache's length (KVCache::device_length), the sampling step and each row's next position,
// advanced by one kernel per step — and the step reads and writes only buffers made once per
// call: its input tokens, its sampled tokens, log-probabilities and mask, `done`, and the
// (N, B) answers they are copied into at the step's row. On a CUDA device the first decode
// step is recorded as a CUDA graph (DeviceRuntime::record) and every step replays it: one
// launch per token. The host side of the step (module hooks included) runs once, at the
// recording. Where the step cannot be recorded (sampling that goes through the host: top_k
// over kMaxDeviceTopK; a model whose step makes the host wait or talks to other ranks) the
// steps run as plain launches, after one warning; the tokens are the same either way, as
// they are on the CPU, where the same step runs without a graph. SamplingOptions::cuda_graph
// false, or the environment variable TRIAD_CUDA_GRAPH=0, turns graphs off (DeepSpeed's
// enable_cuda_graph, vLLM's enforce_eager).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/language_model.h"

namespace triad::engine {

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy (the most likely token)
  int64_t top_k = 40;        // 0: no limit
  double top_p = 0.95;       // 1: no limit
  int64_t max_new_tokens = 200;
  uint64_t seed = 0;
  int32_t stop_token = -1;  // generation ends after emitting it (-1: never)
  // generate_batch on a CUDA device: replay the decode step as a CUDA graph (Note [Decode
  // graphs]); false, or TRIAD_CUDA_GRAPH=0 in the environment: launch every kernel of every
  // step.
  bool cuda_graph = true;

  void validate() const;  // Error naming the bad option
};

// Picks a token from logits (V values) given a uniform draw u in [0, 1): the
// highest-probability tokens are kept while they are among the top_k and their cumulative
// probability (after temperature) has not yet reached top_p.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, double u);

// Continues `prompt` (at least one token). on_token is called with each new token and may
// return false to stop. When the sequence fills the model's seq_len, the cache is rebuilt
// from the last half of the tokens and generation continues. Returns the new tokens.
std::vector<int32_t> generate(nn::LanguageModel& model, const std::vector<int32_t>& prompt, const SamplingOptions& options,
                              const std::function<bool(int32_t)>& on_token = {});

// What generate_batch made (Note [Batched generation]), on the host. N: the columns
// generated, at most max_new_tokens.
struct BatchGeneration {
  Tensor tokens;          // (B, P + N) i64: the left-padded prompts, then the answers
  Tensor logprobs;        // (B, N) f32: each generated token's log-probability; 0 where masked
  Tensor answer_mask;     // (B, N) f32: 1 at a row's generated tokens (its stop token included)
  std::vector<int64_t> pads;  // pad columns before row b's prompt: its key_start
  int64_t prompt_columns = 0;  // P
};

// Continues every prompt (each at least one token; P + max_new_tokens <= seq_len) with
// options' sampling, on the model's device. pad_token fills the pad columns (any token of
// the vocabulary: what pads hold never matters); first_sample is the global index of
// prompts[0] (the sample indices that seed the draws). Error on bad options or prompts.
BatchGeneration generate_batch(nn::LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const SamplingOptions& options, int32_t pad_token = 0, int64_t first_sample = 0);

}  // namespace triad::engine
