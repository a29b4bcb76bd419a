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

BatchGeneration generate_batch(nn::LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const SamplingOptions& o, int32_t pad_token, int64_t first_sample) {
  o.validate();
  const int64_t B = int64_t(prompts.size()), vocab = model.vocab_size();
  TRIAD_CHECK(B > 0, "generate_batch: expected at least one prompt");
  TRIAD_CHECK(pad_token >= 0 && pad_token < vocab,
              "generate_batch: pad_token must be in [0, " << vocab << "), got " << pad_token);
  TRIAD_CHECK(first_sample >= 0, "generate_batch: first_sample must be >= 0, got " << first_sample);
  BatchGeneration r;
  for (const auto& p : prompts) {
    TRIAD_CHECK(!p.empty(), "generate_batch: prompt " << &p - prompts.data() << " is empty");
    r.prompt_columns = std::max(r.prompt_columns, int64_t(p.size()));
  }
  const int64_t P = r.prompt_columns;
  TRIAD_CHECK(P + o.max_new_tokens <= model.seq_len(),
              "generate_batch: the longest prompt (" << P << " tokens) and max_new_tokens (" << o.max_new_tokens
                                                     << ") exceed the model's seq_len " << model.seq_len());
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(B));  // each row's columns so far
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[size_t(b)];
    r.pads.push_back(P - int64_t(p.size()));
    rows[size_t(b)].assign(size_t(r.pads.back()), pad_token);
    for (const int32_t t : p) {
      TRIAD_CHECK(t >= 0 && t < vocab, "generate_batch: prompt " << b << " holds token " << t << ", outside [0, "
                                                                 << vocab << ")");
      rows[size_t(b)].push_back(t);
    }
  }
  NoGradGuard no_grad;
  model.eval();
  const Device device = model.parameters().front().device();
  const nn::LeftPadding padding = nn::left_padding(r.pads, P, device);
  nn::KVCache cache = model.make_cache(B);
  cache.key_start = padding.key_start;
  // The logits (B, V) of each row's last column, in f32 on the host.
  auto last_logits = [&](const Tensor& logits) {
    return ops::to(ops::contiguous(ops::to(ops::select(logits, 1, logits.size(1) - 1), DType::f32)), Device::cpu());
  };
  std::vector<int64_t> full;
  for (const auto& row : rows) full.insert(full.end(), row.begin(), row.end());
  Tensor last = last_logits(
      model.forward_cached(ops::to(Tensor::from_vector(full, {B, P}), device), cache, padding.positions));
  std::vector<float> logprobs, mask;  // (step, B) while generating
  std::vector<bool> done(size_t(B), false);
  int64_t steps = 0;
  while (steps < o.max_new_tokens && std::find(done.begin(), done.end(), false) != done.end()) {
    const int64_t V = last.size(1);
    std::vector<int64_t> next(static_cast<size_t>(B), pad_token), positions(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      positions[size_t(b)] = P - r.pads[size_t(b)] + steps;
      if (done[size_t(b)]) {
        logprobs.push_back(0.0f);
        mask.push_back(0.0f);
        continue;
      }
      const float* row = last.data<float>() + b * V;
      const double u = random_uniform(random_bits(o.seed, uint64_t(first_sample + b)), uint64_t(steps));
      const int32_t token = sample_token(row, vocab, o, u);
      const double top = *std::max_element(row, row + vocab);
      double total = 0;
      for (int64_t j = 0; j < vocab; ++j) total += std::exp(double(row[j]) - top);
      logprobs.push_back(float(double(row[token]) - top - std::log(total)));
      mask.push_back(1.0f);
      next[size_t(b)] = token;
      done[size_t(b)] = token == o.stop_token;
    }
    for (int64_t b = 0; b < B; ++b) rows[size_t(b)].push_back(next[size_t(b)]);
    ++steps;
    if (steps < o.max_new_tokens && std::find(done.begin(), done.end(), false) != done.end())
      last = last_logits(model.forward_cached(ops::to(Tensor::from_vector(next, {B, 1}), device), cache,
                                              ops::to(Tensor::from_vector(positions, {B, 1}), device)));
  }
  full.clear();
  for (const auto& row : rows) full.insert(full.end(), row.begin(), row.end());
  r.tokens = Tensor::from_vector(full, {B, P + steps});
  // (steps, B) -> (B, steps)
  r.logprobs = ops::contiguous(ops::transpose(Tensor::from_vector(logprobs, {steps, B}), 0, 1));
  r.answer_mask = ops::contiguous(ops::transpose(Tensor::from_vector(mask, {steps, B}), 0, 1));
  return r;
}

}  // namespace triad::engine
