// The CPU backend's Mixture-of-Experts routing (tensor/expert_routing.h, Note [MoE routing]
// in nn/moe_routing.h): the reference the CUDA kernels (cuda/backend/moe_route_kernels.cuh)
// follow. A token's choices come from the shared moe_choose; slots are given expert by
// expert, keeping over capacity the choices of largest priority with a stable sort.
#include <algorithm>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace triad {

namespace {

RouteValues route_values(const Tensor& t) {
  RouteValues v;
  if (t.defined() && t.dtype() == DType::f64) v.f64 = t.data<double>();
  if (t.defined() && t.dtype() == DType::f32) v.f32 = t.data<float>();
  return v;
}

// given, or else drawn by `draws` (Gumbel noise when gumbel).
RouteValues given_or_drawn(const Tensor& given, const RouteDraws& draws, bool gumbel) {
  RouteValues v = route_values(given);
  if (!given.defined()) v.draws = draws, v.gumbel = gumbel;
  return v;
}

// Gives the kept choices (s K + j) of each expert their locations in token order. Over
// capacity (capacity >= 0) an expert keeps the choices of largest priority (stable: ties to
// the earlier token), or its first ones when there is no priority.
void place_by_priority(const int64_t* expert, int64_t S, int64_t E, int64_t K, int64_t capacity,
                       const RouteValues& priority, int64_t* location) {
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(E));  // choices in token order
  for (int64_t c = 0; c < S * K; ++c) routed[size_t(expert[c])].push_back(c);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t>& choices = routed[size_t(e)];
    if (capacity >= 0 && int64_t(choices.size()) > capacity) {
      if (priority.present())
        std::stable_sort(choices.begin(), choices.end(), [&](int64_t a, int64_t b) {
          return priority.at((a / K) * E + e) > priority.at((b / K) * E + e);
        });
      choices.resize(size_t(capacity));
      std::sort(choices.begin(), choices.end());
    }
    for (size_t i = 0; i < choices.size(); ++i) location[choices[i]] = int64_t(i);
  }
}

}  // namespace

void CpuBackend::moe_route(const Tensor& probs, const Tensor& logits, const Tensor& noise, const Tensor& priority,
                           const MoERouting& routing, const Tensor& expert, const Tensor& location, const Tensor& load,
                           const Tensor& first_load) {
  const int64_t S = probs.size(0), E = probs.size(1), K = routing.k, C = routing.capacity;
  const RouteValues p = route_values(probs), l = route_values(logits);
  const RouteValues added = given_or_drawn(noise, routing.noise, /*gumbel=*/true);
  int64_t* ex = expert.data<int64_t>();
  int64_t* loc = location.data<int64_t>();
  for (int64_t s = 0; s < S; ++s) moe_choose(p, l, added, s, E, K, ex + s * K);

  int64_t* n = load.data<int64_t>();
  int64_t* first = first_load.data<int64_t>();
  std::fill_n(n, E, 0);
  std::fill_n(first, E, 0);
  for (int64_t c = 0; c < S * K; ++c) {
    ++n[ex[c]];
    if (c % K == 0) ++first[ex[c]];
  }
  std::fill_n(loc, S * K, -1);
  if (K == 2) {
    for (int64_t j = 0; j < 2; ++j) {
      // The next location of each expert: second choices start after all first choices.
      std::vector<int64_t> next(first, first + E);
      if (j == 0) std::fill(next.begin(), next.end(), 0);
      for (int64_t s = 0; s < S; ++s) {
        const int64_t c = s * 2 + j, at = next[size_t(ex[c])]++;
        if (C < 0 || at < C) loc[c] = at;
      }
    }
  } else {
    const RouteValues by = K == 1 ? given_or_drawn(priority, routing.priority, /*gumbel=*/false) : p;
    place_by_priority(ex, S, E, K, C, by, loc);
  }
}

// Expert e's rows start at e C, or dropless after the load of the experts before it.
void CpuBackend::moe_indices(const Tensor& expert, const Tensor& location, int64_t experts, int64_t capacity,
                             const Tensor& load, const Tensor& choice, const Tensor& slot, const Tensor& source) {
  const int64_t S = expert.size(0), K = expert.size(1), E = experts, rows = source.numel();
  const int64_t* ex = expert.data<int64_t>();
  const int64_t* loc = location.data<int64_t>();
  int64_t* ch = choice.data<int64_t>();
  int64_t* sl = slot.data<int64_t>();
  int64_t* src = source.data<int64_t>();
  std::vector<int64_t> start(size_t(E) + 1, 0);  // and the end of the last
  for (int64_t e = 0; e < E; ++e)
    start[size_t(e) + 1] = load.defined() ? start[size_t(e)] + load.data<int64_t>()[e] : (e + 1) * capacity;
  std::fill_n(src, rows, S);
  for (int64_t c = 0; c < S * K; ++c) {
    const bool kept = loc[c] >= 0;
    TRIAD_ASSERT(kept || !load.defined());
    TRIAD_ASSERT(!kept || (ex[c] >= 0 && ex[c] < E && start[size_t(ex[c])] + loc[c] < start[size_t(ex[c]) + 1]));
    ch[c] = kept ? (c / K) * E + ex[c] : S * E;
    sl[c] = kept ? start[size_t(ex[c])] + loc[c] : rows;
    if (kept) src[sl[c]] = c / K;
  }
}

}  // namespace triad
