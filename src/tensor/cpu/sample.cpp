// The CPU backend's token sampling (Note [Token sampling] in tensor/sampling.h): the
// reference the CUDA kernel follows.
#include <algorithm>
#include <cmath>

#include "tensor/cpu/cpu_backend.h"

namespace triad {

void CpuBackend::sample_tokens(const Tensor& logits, int64_t vocab, const TokenSampling& s, const Tensor& done,
                               const Tensor& tokens, const Tensor& logprobs, const Tensor& mask, const Tensor& step) {
  const int64_t B = logits.size(0), at = step.defined() ? step.data<int64_t>()[0] : s.step;
  const float* base = logits.data<float>();
  float* finished = done.data<float>();
  int64_t* token = tokens.data<int64_t>();
  float* logprob = logprobs.data<float>();
  float* answer = mask.data<float>();
  for (int64_t b = 0; b < B; ++b) {
    if (finished[b] != 0.0f) {
      token[b] = s.pad_token;
      logprob[b] = answer[b] = 0.0f;
      continue;
    }
    const float* row = base + b * logits.stride(0);
    const double u = sampling_draw(s.seed, s.first_sample + b, at);
    const int32_t t = sample_token(row, vocab, s.temperature, s.top_k, s.top_p, u);
    const double top = *std::max_element(row, row + vocab);
    double total = 0;
    for (int64_t j = 0; j < vocab; ++j) total += std::exp(double(row[j]) - top);
    token[b] = t;
    logprob[b] = float(double(row[t]) - top - std::log(total));
    answer[b] = 1.0f;
    finished[b] = t == s.stop_token ? 1.0f : 0.0f;
  }
}

}  // namespace triad
