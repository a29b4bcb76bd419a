// Token routing of a Mixture-of-Experts layer: which expert, and which of its slots, each
// token's choices take. DeepSpeed's top1gating, top2gating and topkgating
// (deepspeed/moe/sharded_moe.py) as integer bookkeeping over the gate's probabilities.
//
// It runs on the host: routing is argmax, counts and running sums over S x E numbers, and
// its result sizes the dispatch buffer (in dropless mode the capacity is the largest
// count), so the host has to know it anyway, as DeepSpeed reads the capacity back every
// step. The differentiable part, the gate weights, stays on the tensors' device
// (nn/moe_gate.h).
#pragma once

#include <cstdint>
#include <vector>

namespace triad::nn {

// Note [MoE routing]
// S tokens, E experts; each token makes k choices of distinct experts (choice 0 the first).
// Expert e has `capacity` slots; choice j of token s takes slot location(s, j) of its expert
// or, past the capacity, is dropped (its token gets nothing from that expert).
// - Capacity: when dropping, max(ceil(S / E * cf * k), min_capacity) (expert_capacity);
//   dropless, the largest number of choices any expert received.
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
// For k = 1 and k >= 3 the kept choices of an expert take its slots in token order.
// DeepSpeed keeps top-1 tokens over capacity with torch.topk over a 0/1 mask when RTS is
// off, which leaves the choice among ties unspecified; here it is the first tokens.
struct RoutingOptions {
  int64_t k = 1;
  double capacity_factor = 1.0;  // the one in effect (training or eval)
  int64_t min_capacity = 4;
  bool drop_tokens = true;
};

// The random inputs of one routing, each (S, E) row-major; empty when not drawn.
struct RoutingNoise {
  std::vector<double> logits;    // added to the logits that pick the sampled choice (k 1 or 2)
  std::vector<double> priority;  // k = 1: random token selection's priorities
};

struct Routing {
  int64_t tokens = 0, experts = 0, k = 0, capacity = 0;
  std::vector<int64_t> expert;      // (S, k): the expert of choice j of token s
  std::vector<int64_t> location;    // (S, k): its slot in that expert, -1 when dropped
  std::vector<int64_t> load;        // (E): choices each expert received, before capacity
  std::vector<int64_t> first_load;  // (E): first choices each expert received

  // The flat slot e * capacity + location of a kept choice in an (E, capacity) buffer; -1
  // when dropped.
  int64_t slot(int64_t s, int64_t j) const;
  int64_t dropped() const;            // choices dropped
  std::vector<int64_t> kept() const;  // (E): choices each expert keeps
};

// max(ceil(S / E * capacity_factor * k), min_capacity), with the product rounded to f32 as
// DeepSpeed's torch arithmetic does (a Python float times a 0-d f32 tensor): at E = 2, k = 1
// that is 16 for S = 25, cf = 1.2 (exactly 15) and 55 for S = 50, cf = 2.2 (56 in double).
int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t k, double capacity_factor, int64_t min_capacity);

// probs and logits (S, E) row-major: the gate's softmax and the logits it came from.
Routing route_tokens(const std::vector<double>& probs, const std::vector<double>& logits, int64_t tokens,
                     int64_t experts, const RoutingOptions& options, const RoutingNoise& noise = {});

}  // namespace triad::nn
