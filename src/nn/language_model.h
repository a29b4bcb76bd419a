// LanguageModel: what training, checkpoints and generation need of a causal language model,
// whatever its architecture (nn::GPT, nn::Llama): logits of token indices, the mean
// cross-entropy against targets, and incremental decoding over a cache of keys and values.
//
// Note [Left-padded batches]: a batch of sequences of different lengths is left-padded so
// that all end at the same column (rlhf/preference_data.h, Note [Left-padded prompts]): row b
// holds pads_b pad tokens, then its sequence. LeftPadding tells a model so: positions (B, T)
// i64 puts row b's column j at position j - pads_b (the GPT gathers its position rows per
// token, the Llama its rotary angles), and key_start (B,) i64 = pads_b makes every query of
// row b attend only to keys key_start[b] <= j <= its own column (ops::causal_attention). Pad
// columns take any position (left_padding gives 0); their attention outputs 0 and passes no
// gradient, so each real token's logits, and the gradients through them, are those of its row
// run alone without padding (up to rounding). The cache (KVCache::key_start) keeps key_start
// for generation, which appends one column to every row per step (engine/generate.h).
// With sequence parallelism every rank is given the whole batch and its padding, and its
// residual stream holds its own part of the columns (T a multiple of the ranks).
#pragma once

#include <vector>

#include "nn/module.h"

namespace triad::nn {

// Per-row positions and first keys of a left-padded batch (Note [Left-padded batches]), on
// the model's device.
struct LeftPadding {
  Tensor positions;  // (B, T) i64: the position of each token in its own row's sequence
  Tensor key_start;  // (B,) i64: the first column each row's queries see
};

// The padding of a batch whose row b starts with pads[b] pad columns of T: key_start =
// pads, positions[b][j] = max(j - pads[b], 0). Error unless 0 <= pads[b] < T.
LeftPadding left_padding(const std::vector<int64_t>& pads, int64_t T, Device device = Device::cpu());

// Checks of a model `who` given indices (B, T), Error naming what differs: positions i64
// shaped and placed as the indices, in [0, max_position) (checked on the host only);
// key_start i64 (B,) on their device; check_padding, both.
void check_positions(const Tensor& positions, const Tensor& indices, int64_t max_position, const char* who);
void check_key_start(const Tensor& key_start, const Tensor& indices, const char* who);
void check_padding(const LeftPadding& padding, const Tensor& indices, int64_t max_position, const char* who);

// Keys and values of earlier positions, for generation without recomputing them: per
// layer k, v (B, heads, capacity, hs), of which the first `length` positions are filled
// (heads: the key/value heads this rank holds). key_start, when defined, (B,) i64 on the
// model's device: row b's queries see cached columns from key_start[b] on (Note [Left-padded
// batches]); undefined, every column. device_length, when defined, (1,) i64 on the model's
// device holding `length` (Note [Positions on the device] in tensor/ops.h): forward_cached
// then writes the new keys at, and attends up to, the length the kernels read there, so one
// recorded step replays at a moving length (Note [Decode graphs] in engine/generate.h); it
// still checks and advances `length` on the host, and the caller advances device_length (and
// passes positions: without them the positions come from the host's `length`).
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;
  Tensor key_start;
  Tensor device_length;
  int64_t capacity() const { return k.empty() ? 0 : k[0].size(2); }
};

class LanguageModel : public Module {
 public:
  using Module::Module;

  // indices (B, T) -> logits (B, T, V), V the vocabulary columns this rank holds.
  Tensor forward(const Tensor& indices) override = 0;
  // The same for a left-padded batch (Note [Left-padded batches]), differentiable as the
  // forward above (the training pass of PPO/GRPO recomputes log-probs with it); runs the
  // module's forward hooks as operator() does.
  virtual Tensor forward(const Tensor& indices, const LeftPadding& padding) = 0;
  // Mean cross-entropy of the logits for `indices` against `targets` (B, T), skipping -100.
  virtual Tensor loss(const Tensor& indices, const Tensor& targets) = 0;
  // The hidden states (B, T, d_model) the output head reads (after the final norm), of a
  // batch left-padded when `padding` is given: what a value head reads (nn/value_model.h).
  // With sequence parallelism, (B, T / ranks, d_model): this rank's columns.
  // Runs no hooks of this module: call it from the forward of a module holding this one.
  virtual Tensor hidden_states(const Tensor& indices, const LeftPadding* padding = nullptr) = 0;
  // Generation: an empty cache for `batch` sequences of up to seq_len() tokens, and the
  // logits (B, T_new, vocab_size()) of T_new more tokens given the cache, which it extends:
  // equal to the last T_new positions of forward() on the whole sequence. Inference only.
  // positions (B, T_new) i64: each new token's position (a left-padded batch: Note
  // [Left-padded batches], with the cache's key_start set); undefined: the shared range
  // [cache.length, cache.length + T_new). With sequence parallelism it runs paused (Note
  // [Sequence parallelism paused] in nn/parallelism.h): every rank of the group passes the
  // same tokens.
  virtual KVCache make_cache(int64_t batch) const = 0;
  virtual Tensor forward_cached(const Tensor& indices, KVCache& cache, const Tensor& positions = Tensor()) = 0;

  virtual int64_t seq_len() const = 0;     // the longest sequence accepted
  virtual int64_t vocab_size() const = 0;  // tokens (padding columns excluded)
};

}  // namespace triad::nn
