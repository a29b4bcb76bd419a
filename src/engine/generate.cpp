#include "engine/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>

#include "autograd/grad_mode.h"
#include "tensor/device_runtime.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "tensor/sampling.h"

namespace triad::engine {

void SamplingOptions::validate() const {
  TRIAD_CHECK(temperature >= 0.0 && std::isfinite(temperature), "temperature must be >= 0, got " << temperature);
  TRIAD_CHECK(top_k >= 0, "top_k must be >= 0, got " << top_k);
  TRIAD_CHECK(top_p > 0.0 && top_p <= 1.0, "top_p must be in (0, 1], got " << top_p);
  TRIAD_CHECK(max_new_tokens >= 0, "max_new_tokens must be >= 0, got " << max_new_tokens);
}

namespace {

// Whether TRIAD_CUDA_GRAPH leaves decode graphs on (Note [Decode graphs]): unset or any value
// but 0, off and false.
bool cuda_graphs_allowed() {
  const char* v = std::getenv("TRIAD_CUDA_GRAPH");
  return !v || (std::strcmp(v, "0") != 0 && std::strcmp(v, "off") != 0 && std::strcmp(v, "false") != 0);
}

// Once per process: why decode steps run without a graph.
void warn_no_graph(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr, "triad: warning: generation runs without CUDA graphs: %s\n", why.c_str());
  });
}

}  // namespace

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, double u) {
  return triad::sample_token(logits, vocab, o.temperature, o.top_k, o.top_p, u);
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
  // the host, in f32, where sampling reads them.
  auto feed = [&](const std::vector<int32_t>& ids) {
    const std::vector<int64_t> wide(ids.begin(), ids.end());
    const Tensor indices = ops::to(Tensor::from_vector(wide, {1, int64_t(wide.size())}), device);
    const Tensor logits = model.forward_cached(indices, cache);
    const Tensor last = ops::select(ops::select(logits, 0, 0), 0, int64_t(wide.size()) - 1);
    return ops::to(ops::to(ops::contiguous(last), Device::cpu()), DType::f32);
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
  // The logits (B, W) of each row's last column, in f32, where the model made them.
  auto last_logits = [](const Tensor& logits) { return ops::to(ops::select(logits, 1, logits.size(1) - 1), DType::f32); };
  std::vector<int64_t> full;
  for (const auto& row : rows) full.insert(full.end(), row.begin(), row.end());
  const Tensor prompt_logits = last_logits(
      model.forward_cached(ops::to(Tensor::from_vector(full, {B, P}), device), cache, padding.positions));

  // Every step's draws, stop tests and log-probabilities stay on the device (Note [Token
  // sampling]); the host looks at `done` only every `check_every` steps, and the steps run
  // past the last row's stop (all masked) are cut off at the end. A step reads and writes
  // only the buffers below and the counters (Note [Decode graphs]).
  const int64_t N = o.max_new_tokens;
  const Tensor answers = Tensor::zeros({N, B}, DType::i64, device), logprobs = Tensor::zeros({N, B}, DType::f32, device),
               mask = Tensor::zeros({N, B}, DType::f32, device), done = Tensor::zeros({B}, DType::f32, device);
  const Tensor tokens = Tensor::zeros({B}, DType::i64, device), step_logprobs = Tensor::zeros({B}, DType::f32, device),
               step_mask = Tensor::zeros({B}, DType::f32, device);
  std::vector<int64_t> start{P, 0};  // the cache's length, the step; then each row's next position
  for (int64_t b = 0; b < B; ++b) start.push_back(P - r.pads[size_t(b)]);
  const Tensor counters = ops::to(Tensor::from_vector(start, {B + 2}), device);
  const Tensor step = ops::narrow(counters, 0, 1, 1), positions = ops::view(ops::narrow(counters, 0, 2, B), {B, 1});
  cache.device_length = ops::narrow(counters, 0, 0, 1);
  const TokenSampling sampling{.temperature = o.temperature,
                               .top_k = o.top_k,
                               .top_p = o.top_p,
                               .seed = o.seed,
                               .first_sample = first_sample,
                               .stop_token = o.stop_token,
                               .pad_token = pad_token};
  // Samples the step's tokens from `logits` and copies them into the step's row.
  auto sample = [&](const Tensor& logits) {
    ops::sample_tokens_(logits, vocab, sampling, done, tokens, step_logprobs, step_mask, step);
    ops::copy_at_(answers, 0, step, ops::view(tokens, {1, B}));
    ops::copy_at_(logprobs, 0, step, ops::view(step_logprobs, {1, B}));
    ops::copy_at_(mask, 0, step, ops::view(step_mask, {1, B}));
  };
  // One column: the tokens just sampled through the model, then the next step's sampled.
  auto decode = [&] {
    const Tensor logits = last_logits(model.forward_cached(ops::view(tokens, {B, 1}), cache, positions));
    ops::increment_(counters, 1);
    sample(logits);
  };
  std::unique_ptr<DeviceGraph> graph;
  bool record = device.is_cuda() && o.cuda_graph && cuda_graphs_allowed();
  const int64_t check_every = device.is_cpu() ? 1 : 8;  // a look at `done` makes the host wait for a GPU
  for (int64_t s = 0; s < N; ++s) {
    cache.length = P + s - 1;  // what step s feeds the cache: the column sampled at s - 1
    if (s == 0) {
      sample(prompt_logits);
    } else if (graph) {
      graph->replay();
    } else if (record) {
      try {
        graph = device_runtime(device).record(device, decode);
        graph->replay();
      } catch (const Error& e) {
        warn_no_graph(e.what());
        record = false;
        cache.length = P + s - 1;
        decode();
      }
    } else {
      decode();
    }
    if (s + 1 == N || ((s + 1) % check_every == 0 && ops::sum(done).item() == double(B))) break;
  }
  // The columns up to the last one where some row generated.
  const Tensor host_mask = ops::to(mask, Device::cpu());
  int64_t steps = 0;
  for (int64_t s = 0; s < N; ++s)
    for (int64_t b = 0; b < B; ++b)
      if (host_mask.data<float>()[s * B + b] != 0.0f) steps = s + 1;
  const Tensor host_answers = ops::to(ops::narrow(answers, 0, 0, steps), Device::cpu());
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t b = 0; b < B; ++b) rows[size_t(b)].push_back(host_answers.data<int64_t>()[s * B + b]);
  full.clear();
  for (const auto& row : rows) full.insert(full.end(), row.begin(), row.end());
  r.tokens = Tensor::from_vector(full, {B, P + steps});
  // (steps, B) -> (B, steps)
  auto by_row = [&](const Tensor& t) {
    return ops::contiguous(ops::transpose(ops::to(ops::narrow(t, 0, 0, steps), Device::cpu()), 0, 1));
  };
  r.logprobs = by_row(logprobs);
  r.answer_mask = by_row(mask);
  return r;
}

}  // namespace triad::engine
