// Token sampling from rows of logits: temperature, top-k and top-p (nucleus), and the draw
// that picks among the kept tokens.
//
// Note [Token sampling]: a row's candidates are its top_k tokens (all of them at top_k 0)
// in sampling order: higher logit first, then lower token id. With p_i = exp((l_i - l_0) / T)
// summed in that order, the first `keep` candidates are kept, the fewest whose mass reaches
// top_p of the total (all k at top_p 1), and draw u in [0, 1) picks the first candidate at
// which the running sum of p passes u times their mass. Temperature 0 is greedy: the first
// candidate. pick_candidate, the arithmetic after the candidates are known, is one function
// for the host and the CUDA kernel (cuda/backend/sample_kernels.cuh), so both pick the same
// candidate from the same logits (on a GPU, up to its double exp's last bit).
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

// The token draw u picks from one row of `vocab` logits (Note [Token sampling]).
int32_t sample_token(const float* logits, int64_t vocab, double temperature, int64_t top_k, double top_p, double u);

}  // namespace triad
