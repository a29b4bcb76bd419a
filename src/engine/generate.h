// Text generation from a language model (nn/language_model.h: the GPT, the Llama): sampling with temperature, top-k and top-p (nucleus), one
// token at a time over the model's KV cache, so each new token costs one position of
// compute instead of the whole sequence again.
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

}  // namespace triad::engine
