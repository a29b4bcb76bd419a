// The CUDA backend's token sampling (Note [Token sampling] in tensor/sampling.h): one block
// per row finds the row's largest logit and softmax sum; then, untruncated, its threads sum
// the row's chunks and thread 0 picks with the host's own pick_untruncated; truncated, the
// block finds the top_k candidates in sampling order, one block-wide maximum per candidate
// (top_k is small: DeepSpeed-Chat's and triad's defaults are 50 and 40), and thread 0 picks
// with the host's own pick_candidate. A truncated row with more than kMaxDeviceTopK
// candidates (top_k 0 with top_p < 1, or a larger top_k) is sampled on the host (sample.cu).
// The kernel lives in a header of its own so that tests/cuda/test_sample_kernels_emulated.cpp
// runs it on the CPU under an emulation of CUDA.
#pragma once

#include <cstdint>

#include "cuda/backend/launch.cuh"
#include "tensor/sampling.h"

namespace triad::cuda {

constexpr int64_t kMaxDeviceTopK = 1024;  // candidates a block sorts in shared memory
constexpr int kSampleThreads = 256;

namespace {

// A key per (logit, token) whose order as unsigned integers is sampling order reversed:
// the larger key is the higher logit, then the lower token id. 0 is below every key of a
// real (non-NaN) logit. -0 and +0 are one value, as they compare on the host.
__device__ inline uint64_t candidate_key(float logit, int64_t token) {
  uint32_t u = __float_as_uint(logit);
  if (u == 0x80000000u) u = 0;
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(u) << 32) | uint64_t(0xffffffffu - uint32_t(token));
}
__device__ inline int64_t candidate_token(uint64_t key) { return int64_t(0xffffffffu - uint32_t(key)); }

// Row b of logits (rows `row_stride` elements apart; the first `vocab` columns count). done,
// tokens, logprobs and mask as ops::sample_tokens_ describes them; step, when not null, the
// step the draws use instead of s.step (Note [Positions on the device] in tensor/ops.h).
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* logits, int64_t row_stride, int64_t vocab, TokenSampling s, const int64_t* step,
                  float* done, int64_t* tokens, float* logprobs, float* mask) {
  static __shared__ float s_logit[kMaxDeviceTopK];
  static __shared__ int64_t s_token[kMaxDeviceTopK];
  static __shared__ double s_mass[kSamplingChunks];
  const int64_t b = blockIdx.x;
  if (done[b] != 0.0f) {
    if (threadIdx.x == 0) {
      tokens[b] = s.pad_token;
      logprobs[b] = mask[b] = 0.0f;
    }
    return;
  }
  const float* row = logits + b * row_stride;
  uint64_t best = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) best = MaxOp{}(best, candidate_key(row[j], j));
  best = block_reduce(best, MaxOp{}, uint64_t(0));
  const double top = row[candidate_token(best)];
  double total = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) total += ::exp(double(row[j]) - top);
  total = block_reduce(total, SumOp{}, 0.0);

  int64_t token = candidate_token(best);  // greedy
  const double u = sampling_draw(s.seed, s.first_sample + b, step ? *step : s.step);
  if (s.temperature != 0.0 && untruncated(vocab, s.top_k, s.top_p)) {
    for (int64_t c = threadIdx.x; c < kSamplingChunks; c += blockDim.x)
      s_mass[c] = chunk_mass(row, c, vocab, top, s.temperature);
    __syncthreads();
    if (threadIdx.x == 0) token = pick_untruncated(row, vocab, s_mass, top, s.temperature, u);
  } else if (s.temperature != 0.0) {
    const int64_t k = s.top_k > 0 && s.top_k < vocab ? s.top_k : vocab;
    uint64_t previous = best;
    if (threadIdx.x == 0) {
      s_logit[0] = row[token];
      s_token[0] = token;
    }
    for (int64_t i = 1; i < k; ++i) {  // the next candidate: the largest key below the previous
      uint64_t next = 0;
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        const uint64_t key = candidate_key(row[j], j);
        if (key < previous) next = MaxOp{}(next, key);
      }
      previous = block_reduce(next, MaxOp{}, uint64_t(0));
      if (threadIdx.x == 0) {
        s_token[i] = candidate_token(previous);
        s_logit[i] = row[s_token[i]];
      }
    }
    if (threadIdx.x == 0)
      token = s_token[pick_candidate(s_logit, k, s.temperature, s.top_p, u)];
  }
  if (threadIdx.x == 0) {
    tokens[b] = token;
    logprobs[b] = float(double(row[token]) - top - ::log(total));
    mask[b] = 1.0f;
    done[b] = token == s.stop_token ? 1.0f : 0.0f;
  }
}

}  // namespace

}  // namespace triad::cuda
