#include "tensor/sampling.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace triad {

int32_t sample_token(const float* logits, int64_t vocab, double temperature, int64_t top_k, double top_p, double u) {
  if (temperature == 0.0) return int32_t(std::max_element(logits, logits + vocab) - logits);
  if (untruncated(vocab, top_k, top_p)) {
    const double top = *std::max_element(logits, logits + vocab);
    double masses[kSamplingChunks];
    for (int64_t c = 0; c < kSamplingChunks; ++c) masses[c] = chunk_mass(logits, c, vocab, top, temperature);
    return int32_t(pick_untruncated(logits, vocab, masses, top, temperature, u));
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = top_k > 0 ? std::min(top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  std::vector<float> sorted(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) sorted[size_t(i)] = logits[order[size_t(i)]];
  return order[size_t(pick_candidate(sorted.data(), k, temperature, top_p, u))];
}

}  // namespace triad
