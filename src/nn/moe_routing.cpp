#include "nn/moe_routing.h"

#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "tensor/ops.h"

namespace triad::nn {

namespace {

// Given values (S, E) as an f64 tensor on `device`; undefined when empty.
Tensor given(const std::vector<double>& values, int64_t S, int64_t E, Device device) {
  if (values.empty()) return Tensor();
  TRIAD_ASSERT(int64_t(values.size()) == S * E);
  return ops::to(Tensor::from_vector(values, {S, E}), device);
}

}  // namespace

int64_t Routing::dropped() const {
  const std::vector<int64_t> n = load.to_vector<int64_t>();
  int64_t d = 0;
  for (int64_t x : n) d += std::max<int64_t>(x - capacity, 0);
  return d;
}

std::vector<int64_t> Routing::kept() const {
  std::vector<int64_t> n = load.to_vector<int64_t>();
  for (int64_t& x : n) x = std::min(x, capacity);
  return n;
}

int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t k, double capacity_factor, int64_t min_capacity) {
  const float per_expert = float(double(tokens) / double(experts));
  const float factor = float(capacity_factor * double(k));
  const float c = per_expert * factor;
  return std::max(int64_t(std::ceil(c)), min_capacity);
}

Routing route_tokens(const Tensor& probs, const Tensor& logits, const RoutingOptions& options,
                     const RoutingNoise& noise) {
  const int64_t S = probs.size(0), E = probs.size(1), K = options.k;
  Routing r;
  r.tokens = S, r.experts = E, r.k = K;
  const MoERouting routing{
      .k = K,
      .capacity = options.drop_tokens ? expert_capacity(S, E, K, options.capacity_factor, options.min_capacity) : -1,
      .noise = noise.logit_draws,
      .priority = noise.priority_draws};
  ops::MoERouteOut out = ops::moe_route(probs, logits, routing, given(noise.logits, S, E, probs.device()),
                                        given(noise.priority, S, E, probs.device()));
  r.expert = out.expert, r.location = out.location, r.load = out.load, r.first_load = out.first_load;
  if (options.drop_tokens) {
    r.capacity = routing.capacity;
  } else {
    r.host_load = r.load.to_vector<int64_t>();  // the experts' rows: a sync, as DeepSpeed's
    r.capacity = *std::max_element(r.host_load.begin(), r.host_load.end());
  }
  return r;
}

}  // namespace triad::nn
