#include "nn/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "tensor/error.h"

namespace triad::nn {

namespace {

// The first index of the largest of v[i] + add[i] (add may be null), skipping `skip`.
int64_t argmax(const double* v, const double* add, int64_t n, int64_t skip = -1) {
  int64_t best = -1;
  double best_value = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i == skip) continue;
    const double x = add ? v[i] + add[i] : v[i];
    if (best < 0 || x > best_value) best = i, best_value = x;
  }
  return best;
}

// The k experts of largest probability, largest first, ties to the lower expert.
void top_k(const double* p, int64_t n, int64_t k, int64_t* out) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  std::copy_n(order.begin(), k, out);
}

// Gives the kept choices of each expert their locations in token order. Over capacity an
// expert keeps the choices of largest priority(s, e) (stable: ties to the earlier token),
// or its first ones when priority is empty.
void place_by_priority(Routing& r, bool drop, const std::function<double(int64_t s, int64_t e)>& priority) {
  const int64_t S = r.tokens, E = r.experts, K = r.k;
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(E));  // choices (s K + j) in token order
  for (int64_t c = 0; c < S * K; ++c) routed[size_t(r.expert[size_t(c)])].push_back(c);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t>& choices = routed[size_t(e)];
    if (drop && int64_t(choices.size()) > r.capacity) {
      if (priority) {
        std::stable_sort(choices.begin(), choices.end(),
                         [&](int64_t a, int64_t b) { return priority(a / K, e) > priority(b / K, e); });
      }
      choices.resize(size_t(r.capacity));
      std::sort(choices.begin(), choices.end());
    }
    for (size_t i = 0; i < choices.size(); ++i) r.location[size_t(choices[i])] = int64_t(i);
  }
}

}  // namespace

int64_t Routing::slot(int64_t s, int64_t j) const {
  const size_t c = size_t(s * k + j);
  return location[c] < 0 ? -1 : expert[c] * capacity + location[c];
}

int64_t Routing::dropped() const { return std::count(location.begin(), location.end(), int64_t(-1)); }

std::vector<int64_t> Routing::kept() const {
  std::vector<int64_t> n(size_t(experts), 0);
  for (size_t c = 0; c < location.size(); ++c)
    if (location[c] >= 0) ++n[size_t(expert[c])];
  return n;
}

int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t k, double capacity_factor, int64_t min_capacity) {
  const float per_expert = float(double(tokens) / double(experts));
  const float factor = float(capacity_factor * double(k));
  const float c = per_expert * factor;
  return std::max(int64_t(std::ceil(c)), min_capacity);
}

Routing route_tokens(const std::vector<double>& probs, const std::vector<double>& logits, int64_t tokens,
                     int64_t experts, const RoutingOptions& options, const RoutingNoise& noise) {
  const int64_t S = tokens, E = experts, K = options.k;
  TRIAD_ASSERT(S >= 1 && K >= 1 && K <= E);
  TRIAD_ASSERT(int64_t(probs.size()) == S * E && int64_t(logits.size()) == S * E);
  TRIAD_ASSERT(noise.logits.empty() || int64_t(noise.logits.size()) == S * E);
  TRIAD_ASSERT(noise.priority.empty() || int64_t(noise.priority.size()) == S * E);
  Routing r;
  r.tokens = S, r.experts = E, r.k = K;
  r.expert.assign(size_t(S * K), -1);
  r.location.assign(size_t(S * K), -1);
  const double* added = noise.logits.empty() ? nullptr : noise.logits.data();
  for (int64_t s = 0; s < S; ++s) {
    const double* p = probs.data() + s * E;
    const double* l = logits.data() + s * E;
    const double* a = added ? added + s * E : nullptr;
    int64_t* out = r.expert.data() + s * K;
    if (K == 1) {
      out[0] = a ? argmax(l, a, E) : argmax(p, nullptr, E);
    } else if (K == 2) {
      out[0] = argmax(p, nullptr, E);
      out[1] = argmax(l, a, E, out[0]);
    } else {
      top_k(p, E, K, out);
    }
  }
  r.load.assign(size_t(E), 0);
  r.first_load.assign(size_t(E), 0);
  for (int64_t c = 0; c < S * K; ++c) {
    ++r.load[size_t(r.expert[size_t(c)])];
    if (c % K == 0) ++r.first_load[size_t(r.expert[size_t(c)])];
  }
  const bool drop = options.drop_tokens;
  r.capacity = drop ? expert_capacity(S, E, K, options.capacity_factor, options.min_capacity)
                    : *std::max_element(r.load.begin(), r.load.end());

  if (K == 2) {
    for (int64_t j = 0; j < 2; ++j) {
      // The next location of each expert: second choices start after all first choices.
      std::vector<int64_t> next = j == 0 ? std::vector<int64_t>(size_t(E), 0) : r.first_load;
      for (int64_t s = 0; s < S; ++s) {
        const size_t c = size_t(s * 2 + j);
        const int64_t loc = next[size_t(r.expert[c])]++;
        if (!drop || loc < r.capacity) r.location[c] = loc;
      }
    }
  } else if (K == 1 && !noise.priority.empty()) {
    place_by_priority(r, drop, [&](int64_t s, int64_t e) { return noise.priority[size_t(s * E + e)]; });
  } else if (K == 1) {
    place_by_priority(r, drop, {});  // the first tokens keep their places
  } else {
    place_by_priority(r, drop, [&](int64_t s, int64_t e) { return probs[size_t(s * E + e)]; });
  }
  return r;
}

}  // namespace triad::nn
