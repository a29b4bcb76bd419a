// Token sampling from rows of logits: temperature, top-k and top-p (nucleus), and the draw
// that picks among the kept tokens.
//
// Note [Token sampling]: a draw u in [0, 1) picks a token from p_i = exp((l_i - l_max) / T)
// by inverse transform: the first token at which a running sum of p passes u times the mass
// of the tokens kept. Which tokens are kept, and in which order the sum runs:
// - truncated (top_k in [1, vocab) or top_p < 1): the candidates are the top_k tokens (all
//   at top_k 0) in sampling order, higher logit first, then lower token id; summed in that
//   order, the first `keep` are kept, the fewest whose mass reaches top_p of the candidates'
//   (pick_candidate);
// - untruncated (every token kept): the tokens in id order, summed in kSamplingChunks
//   chunks of consecutive ids, each chunk on its own, then the chunks in order
//   (pick_untruncated): a GPU block sums the chunks in parallel, and no sort is needed;
// - temperature 0: greedy, the first token in sampling order.
// The arithmetic after the candidates or the chunks' masses are known is one function for
// the host and the CUDA kernel (cuda/backend/sample_kernels.cuh), so both pick the same
// token from the same logits (on a GPU, up to its double exp's last bit).
//
// ops::sample_tokens_ samples one step of batched generation on the logits' device: row b
// draws u = random_uniform(random_bits(seed, first_sample + b), step), so global sample g
// gets the same draws whatever batch, rank or layout generates it (Note [Batched
// generation], engine/generate.h); a row marked done takes pad_token, log-probability 0 and
// mask 0, any other row its sampled token, the token's log-softmax of the raw logits
// (temperature 1, over the whole vocabulary), mask 1, and is marked done when the token is
// stop_token. Only these (B)-element tensors change: the logits never leave the device.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/host_device.h"
#include "tensor/random.h"

namespace triad {

// One step of ops::sample_tokens_.
struct TokenSampling {
  double temperature = 1.0;  // >= 0; 0: greedy
  int64_t top_k = 0;         // >= 0; 0: no limit
  double top_p = 1.0;        // in (0, 1]
  uint64_t seed = 0;
  int64_t first_sample = 0;  // the global index of row 0
  int64_t step = 0;          // the column being generated
  int64_t stop_token = -1;   // -1: none
  int64_t pad_token = 0;     // what a done row takes
};

// The draw of global sample `sample` at generation step `step`.
TRIAD_HOST_DEVICE inline double sampling_draw(uint64_t seed, int64_t sample, int64_t step) {
  return random_uniform(random_bits(seed, uint64_t(sample)), uint64_t(step));
}

// The position, among k >= 1 candidates whose logits `sorted` holds in sampling order, that
// draw u picks at temperature > 0 (Note [Token sampling]).
TRIAD_HOST_DEVICE inline int64_t pick_candidate(const float* sorted, int64_t k, double temperature, double top_p,
                                                double u) {
  const double top = sorted[0];
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += ::exp((double(sorted[i]) - top) / temperature);
  int64_t keep = 0;
  double mass = 0;
  while (keep < k && mass < top_p * total) mass += ::exp((double(sorted[keep++]) - top) / temperature);
  double r = u * mass;
  for (int64_t i = 0; i < keep; ++i) {
    r -= ::exp((double(sorted[i]) - top) / temperature);
    if (r < 0) return i;
  }
  return keep - 1;
}

// Untruncated sampling (Note [Token sampling]): chunk c of `vocab` tokens starts at
// chunk_begin(c); chunk_mass is its mass, summed in id order.
constexpr int64_t kSamplingChunks = 256;
TRIAD_HOST_DEVICE inline int64_t chunk_begin(int64_t c, int64_t vocab) { return c * vocab / kSamplingChunks; }
TRIAD_HOST_DEVICE inline double chunk_mass(const float* row, int64_t c, int64_t vocab, double top, double temperature) {
  double mass = 0;
  for (int64_t j = chunk_begin(c, vocab), end = chunk_begin(c + 1, vocab); j < end; ++j)
    mass += ::exp((double(row[j]) - top) / temperature);
  return mass;
}

// The token draw u picks from a row whose chunks have the masses `masses` (kSamplingChunks
// of them), top being the row's largest logit: in the first chunk whose end the running sum
// passes u times the total (the last chunk of positive mass where rounding leaves it short),
// the first token at which the sum passes it (the chunk's last token of positive p where
// rounding leaves it short).
TRIAD_HOST_DEVICE inline int64_t pick_untruncated(const float* row, int64_t vocab, const double* masses, double top,
                                                  double temperature, double u) {
  double total = 0;
  for (int64_t c = 0; c < kSamplingChunks; ++c) total += masses[c];
  const double r = u * total;
  int64_t chunk = 0;
  double before = 0, start = 0;  // the mass before chunk c; before the chosen chunk
  for (int64_t c = 0; c < kSamplingChunks; ++c) {
    if (masses[c] > 0) {
      chunk = c;
      start = before;
      if (r < before + masses[c]) break;
    }
    before += masses[c];
  }
  double running = start;
  int64_t last = chunk_begin(chunk, vocab);
  for (int64_t j = chunk_begin(chunk, vocab), end = chunk_begin(chunk + 1, vocab); j < end; ++j) {
    const double p = ::exp((double(row[j]) - top) / temperature);
    running += p;
    if (r < running) return j;
    if (p > 0) last = j;
  }
  return last;
}

// Whether sampling keeps every token (Note [Token sampling]).
TRIAD_HOST_DEVICE inline bool untruncated(int64_t vocab, int64_t top_k, double top_p) {
  return (top_k == 0 || top_k >= vocab) && top_p >= 1.0;
}

// The token draw u picks from one row of `vocab` logits (Note [Token sampling]).
int32_t sample_token(const float* logits, int64_t vocab, double temperature, int64_t top_k, double top_p, double u);

}  // namespace triad
