// Token routing of a Mixture-of-Experts layer: which expert, and which of its slots, each
// token's choices take. DeepSpeed's top1gating, top2gating and topkgating
// (deepspeed/moe/sharded_moe.py) as integer bookkeeping over the gate's probabilities.
//
// It runs on the probabilities' device (ops::moe_route: kernels on a GPU, equal to the CPU
// backend's choice for choice), so a step routes without waiting for the device. The host
// waits only where it must know a count: dropless mode sizes each expert's rows by its
// load (DeepSpeed reads the largest load back too), and reading a Routing's counts
// (dropped(), kept(), MoEStats) for tests and metrics.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/expert_routing.h"
#include "tensor/tensor.h"

namespace triad::nn {

// Note [MoE routing]
// S tokens, E experts; each token makes k choices of distinct experts (choice 0 the first).
// Expert e has `capacity` slots; choice j of token s takes slot location(s, j) of its expert
// or, past the capacity, is dropped (its token gets nothing from that expert).
// - Capacity: when dropping, max(ceil(S / E * cf * k), min_capacity) (expert_capacity);
//   dropless, the largest number of choices any expert received (each expert then runs
//   on exactly its own: Note [Dropless exchange] in nn/expert_exchange.h).
// - k = 1: the expert of largest probability (first on ties, as torch.argmax); with
//   RSample noise, of largest logit + noise. Over capacity an expert keeps the `capacity`
//   tokens of largest priority (random token selection: uniform draws; ties to the earlier
//   token) or, without priorities, its first tokens.
// - k = 2: the first choice as top-1's; the second, the largest logit + noise (Gumbel, when
//   top2_2nd_expert_sampling) among the other experts. Locations are positional: first
//   choices in token order, then second choices in token order after all the first choices
//   the expert received, kept or not; a location >= capacity is dropped.
// - k >= 3: the k largest probabilities (ties to the lower expert). Over capacity an
//   expert keeps the choices of largest probability (ties to the earlier token).
// For k = 1 and k >= 3 the kept choices of an expert take its slots in token order. In
// every mode an expert keeps min(load, capacity) of the choices it received.
// Draws are counter-based (tensor/random.h): (token s, expert e) takes counter
// first + s E + e of the gate generator's seed, the generator advanced by S E per draw, so
// both backends draw the same numbers.
// DeepSpeed keeps top-1 tokens over capacity with torch.topk over a 0/1 mask when RTS is
// off, which leaves the choice among ties unspecified; here it is the first tokens.
struct RoutingOptions {
  int64_t k = 1;
  double capacity_factor = 1.0;  // the one in effect (training or eval)
  int64_t min_capacity = 4;
  bool drop_tokens = true;
};

// The random inputs of one routing: given values, (S, E) row-major (tests give DeepSpeed's
// own), or else draws on the device (tensor/expert_routing.h), or none.
struct RoutingNoise {
  std::vector<double> logits;    // added to the logits that pick the sampled choice (k 1 or 2)
  std::vector<double> priority;  // k = 1: random token selection's priorities
  RouteDraws logit_draws;        // Gumbel noise for `logits` when it is empty
  RouteDraws priority_draws;     // uniform priorities when `priority` is empty
};

// A routing, as tensors on the device of the probabilities it came from.
struct Routing {
  int64_t tokens = 0, experts = 0, k = 0, capacity = 0;
  Tensor expert;      // (S, k) i64: the expert of choice j of token s
  Tensor location;    // (S, k) i64: its slot in that expert, -1 when dropped
  Tensor load;        // (E) i64: choices each expert received, before capacity
  Tensor first_load;  // (E) i64: first choices each expert received
  std::vector<int64_t> host_load;  // dropless: load, read back to the host (the sizes of the experts' rows)

  // What the host reads back (a device sync). An expert keeps min(load, capacity) choices
  // in every mode (Note [MoE routing]).
  int64_t dropped() const;            // choices dropped
  std::vector<int64_t> kept() const;  // (E): choices each expert keeps
};

// Note [MoE gathers]
// The gate weights, dispatch and combine are single gathers by the indices of
// ops::moe_indices (embedding, whose backward scatter-adds): of rows (n, d), a dropped choice
// or an empty slot reading row n, a row of zeros past the end (TableRows::zero_past_end),
// which no copy appends and which takes no gradient. Dropless, no choice is dropped and no
// slot empty, and the indices never reach n.

// max(ceil(S / E * capacity_factor * k), min_capacity), with the product rounded to f32 as
// DeepSpeed's torch arithmetic does (a Python float times a 0-d f32 tensor): at E = 2, k = 1
// that is 16 for S = 25, cf = 1.2 (exactly 15) and 55 for S = 50, cf = 2.2 (56 in double).
int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t k, double capacity_factor, int64_t min_capacity);

// probs and logits (S, E): the gate's softmax and the logits it came from, f32 or f64 (on a
// GPU, f32), on one device. Dropless, the capacity is read back from the loads.
Routing route_tokens(const Tensor& probs, const Tensor& logits, const RoutingOptions& options,
                     const RoutingNoise& noise = {});

}  // namespace triad::nn
