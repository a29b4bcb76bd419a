// Mixture-of-Experts token routing as tensor ops (ops::moe_route, ops::moe_indices): from a
// gate's probabilities and logits to each token's experts, their slots and the experts'
// loads, on the tensors' device. The semantics (DeepSpeed's top1gating, top2gating and
// topkgating) are Note [MoE routing] in nn/moe_routing.h; this header holds what the CPU
// backend and the CUDA kernels (cuda/backend/moe_route_kernels.cuh) share bit for bit: the
// choice of a token's experts and the random draws.
//
// Draws are counter-based (tensor/random.h): the value of (token s, expert e) is
// random_uniform(seed, first + s E + e), so the host and a device draw the same numbers,
// whatever the threads. Gumbel noise is -log(-log u) of such a draw in double (on a GPU, up
// to its double log's last bit).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "tensor/host_device.h"
#include "tensor/random.h"

namespace triad {

// Per-(token, expert) values of a routing: given (an (S, E) f64 tensor's data: tests give
// DeepSpeed's own), drawn from (seed, first), or absent.
struct RouteDraws {
  bool drawn = false;  // draw when no values are given
  uint64_t seed = 0, first = 0;
};

// The options of one routing.
struct MoERouting {
  int64_t k = 1;
  int64_t capacity = -1;  // slots per expert when dropping; -1: dropless (nothing dropped)
  RouteDraws noise;       // Gumbel noise on the logits that pick the sampled choice (k 1 or 2)
  RouteDraws priority;    // k = 1: random token selection's priorities, uniform in [0, 1)
};

// Values of one (S, E) operand read as double: f32 or f64 storage, or draws.
struct RouteValues {
  const float* f32 = nullptr;
  const double* f64 = nullptr;
  RouteDraws draws;
  bool gumbel = false;  // draws are Gumbel noise rather than uniform

  TRIAD_HOST_DEVICE bool present() const { return f32 || f64 || draws.drawn; }
  TRIAD_HOST_DEVICE double at(int64_t i) const {
    if (f64) return f64[i];
    if (f32) return double(f32[i]);
    const double u = random_uniform(draws.seed, draws.first + uint64_t(i));
    return gumbel ? -::log(-::log(u > DBL_MIN ? u : DBL_MIN)) : u;  // u kept off 0: every draw finite
  }
};

// The first expert of largest v[e] (+ add[e] when present) that `taken[0..ntaken)` does not
// hold: torch.argmax's tie rule.
TRIAD_HOST_DEVICE inline int64_t moe_argmax(const RouteValues& v, const RouteValues& add, int64_t row, int64_t E,
                                            const int64_t* taken, int64_t ntaken) {
  int64_t best = -1;
  double best_value = 0;
  for (int64_t e = 0; e < E; ++e) {
    bool skip = false;
    for (int64_t j = 0; j < ntaken; ++j) skip = skip || taken[j] == e;
    if (skip) continue;
    const double x = add.present() ? v.at(row + e) + add.at(row + e) : v.at(row + e);
    if (best < 0 || x > best_value) best = e, best_value = x;
  }
  return best;
}

// Token s's k distinct experts into out[0..k) (Note [MoE routing]): k = 1 the largest
// probability, or the largest logit + noise when there is noise; k = 2 that first choice,
// then the largest logit (+ noise) among the others; k >= 3 the k largest probabilities,
// largest first, ties to the lower expert.
TRIAD_HOST_DEVICE inline void moe_choose(const RouteValues& probs, const RouteValues& logits, const RouteValues& noise,
                                         int64_t s, int64_t E, int64_t k, int64_t* out) {
  const int64_t row = s * E;
  const RouteValues none;
  if (k == 1) {
    out[0] = noise.present() ? moe_argmax(logits, noise, row, E, out, 0) : moe_argmax(probs, none, row, E, out, 0);
  } else if (k == 2) {
    out[0] = moe_argmax(probs, none, row, E, out, 0);
    out[1] = moe_argmax(logits, noise, row, E, out, 1);
  } else {
    for (int64_t j = 0; j < k; ++j) out[j] = moe_argmax(probs, none, row, E, out, j);
  }
}

}  // namespace triad
