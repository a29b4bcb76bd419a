// LanguageModel: what training, checkpoints and generation need of a causal language model,
// whatever its architecture (nn::GPT, nn::Llama): logits of token indices, the mean
// cross-entropy against targets, and incremental decoding over a cache of keys and values.
#pragma once

#include <vector>

#include "nn/module.h"

namespace triad::nn {

// Keys and values of earlier positions, for generation without recomputing them: per
// layer k, v (B, heads, capacity, hs), of which the first `length` positions are filled
// (heads: the key/value heads this rank holds).
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;
  int64_t capacity() const { return k.empty() ? 0 : k[0].size(2); }
};

class LanguageModel : public Module {
 public:
  using Module::Module;

  // indices (B, T) -> logits (B, T, V), V the vocabulary columns this rank holds.
  Tensor forward(const Tensor& indices) override = 0;
  // Mean cross-entropy of the logits for `indices` against `targets` (B, T), skipping -100.
  virtual Tensor loss(const Tensor& indices, const Tensor& targets) = 0;
  // Generation: an empty cache for `batch` sequences of up to seq_len() tokens, and the
  // logits (B, T_new, vocab_size()) of T_new more tokens given the cache, which it extends:
  // equal to the last T_new positions of forward() on the whole sequence. Inference only.
  virtual KVCache make_cache(int64_t batch) const = 0;
  virtual Tensor forward_cached(const Tensor& indices, KVCache& cache) = 0;

  virtual int64_t seq_len() const = 0;     // the longest sequence accepted
  virtual int64_t vocab_size() const = 0;  // tokens (padding columns excluded)
};

}  // namespace triad::nn
