#include "engine/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace triad::engine {

void SamplingOptions::validate() const {
  TRIAD_CHECK(temperature >= 0.0 && std::isfinite(temperature), "temperature must be >= 0, got " << temperature);
  TRIAD_CHECK(top_k >= 0, "top_k must be >= 0, got " << top_k);
  TRIAD_CHECK(top_p > 0.0 && top_p <= 1.0, "top_p must be in (0, 1], got " << top_p);
  TRIAD_CHECK(max_new_tokens >= 0, "max_new_tokens must be >= 0, got " << max_new_tokens);
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, double u) {
  if (o.temperature == 0.0) return int32_t(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  order.resize(k);
  std::vector<double> p(k);
  const double top = logits[order[0]];
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp((double(logits[order[i]]) - top) / o.temperature);
  int64_t keep = 0;
  double mass = 0;
  while (keep < k && mass < o.top_p * total) mass += p[keep++];
  double r = u * mass;
  for (int64_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r < 0) return order[i];
  }
  return order[keep - 1];
}

std::vector<int32_t> generate(nn::LanguageModel& model, const std::vector<int32_t>& prompt, const SamplingOptions& o,
                              const std::function<bool(int32_t)>& on_token) {
  o.validate();
  TRIAD_CHECK(!prompt.empty(), "generate: the prompt must hold at least one token");
  NoGradGuard no_grad;
  model.eval();
  const int64_t seq_len = model.seq_len(), vocab = model.vocab_size();
  std::vector<int32_t> tokens = prompt, out;
  nn::KVCache cache = model.make_cache(1);
  const Device device = model.parameters().front().device();
  // Feeds `ids` after what the cache holds and returns the logits of the last position, on
  // the host where sampling reads them.
  auto feed = [&](const std::vector<int32_t>& ids) {
    const std::vector<int64_t> wide(ids.begin(), ids.end());
    const Tensor indices = ops::to(Tensor::from_vector(wide, {1, int64_t(wide.size())}), device);
    const Tensor logits = model.forward_cached(indices, cache);
    return ops::to(ops::contiguous(ops::select(ops::select(logits, 0, 0), 0, int64_t(wide.size()) - 1)), Device::cpu());
  };
  auto refill = [&] {  // restart the cache on the most recent tokens
    const size_t keep = std::min<size_t>(tokens.size(), size_t(std::max<int64_t>(seq_len / 2, 1)));
    cache.length = 0;
    return feed(std::vector<int32_t>(tokens.end() - int64_t(keep), tokens.end()));
  };
  Tensor last = int64_t(tokens.size()) <= seq_len ? feed(tokens) : refill();
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const double u = random_uniform(o.seed, uint64_t(i));
    const int32_t next = sample_token(last.data<float>(), vocab, o, u);
    tokens.push_back(next);
    out.push_back(next);
    if ((on_token && !on_token(next)) || next == o.stop_token) break;
    last = cache.length < seq_len ? feed({next}) : refill();
  }
  return out;
}

}  // namespace triad::engine
