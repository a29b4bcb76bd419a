// Deterministic batch sampling (Note [Global batch] in sampler.h): a counter-based hash,
// no generator state, so any step's batch can be computed directly.
#include "io/sampler.h"

#include <cmath>

namespace triad::io {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::pair<TokenRange, TokenRange> split_train_val(int64_t n_tokens, double val_fraction) {
  TRIAD_CHECK(n_tokens >= 0, "split_train_val: n_tokens must be >= 0, got " << n_tokens);
  TRIAD_CHECK(val_fraction >= 0.0 && val_fraction <= 0.5,
              "split_train_val: val_fraction must be in [0, 0.5], got " << val_fraction);
  const auto n_val = int64_t(std::llround(double(n_tokens) * val_fraction));
  return {TokenRange{0, n_tokens - n_val}, TokenRange{n_tokens - n_val, n_tokens}};
}

BatchSampler::BatchSampler(TokenRange range, int64_t seq_len, uint64_t seed)
    : range_(range), seq_len_(seq_len), seed_(seed) {
  TRIAD_CHECK(seq_len >= 1, "BatchSampler: seq_len must be >= 1, got " << seq_len);
  TRIAD_CHECK(range.begin >= 0 && range.end >= range.begin,
              "BatchSampler: token range [" << range.begin << ", " << range.end << ") is not a valid range");
  TRIAD_CHECK(range.size() >= seq_len + 1, "BatchSampler: token range ["
                                               << range.begin << ", " << range.end << ") holds " << range.size()
                                               << " tokens, fewer than seq_len + 1 = " << seq_len + 1);
}

std::vector<int64_t> BatchSampler::offsets(int64_t step, int64_t batch) const {
  TRIAD_CHECK(step >= 0, "BatchSampler::offsets: step must be >= 0, got " << step);
  TRIAD_CHECK(batch >= 0, "BatchSampler::offsets: batch must be >= 0, got " << batch);
  const auto starts = uint64_t(range_.size() - seq_len_);  // valid starts: begin + [0, starts)
  const uint64_t step_key = splitmix64(splitmix64(seed_) ^ uint64_t(step));
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t row = 0; row < batch; ++row) {
    const uint64_t h = splitmix64(step_key ^ splitmix64(uint64_t(row) + 0x632be59bd9b4e019ull));
    // Multiply-shift maps h onto [0, starts); the bias is below starts / 2^64.
    out[size_t(row)] = range_.begin + int64_t((unsigned __int128)h * starts >> 64);
  }
  return out;
}

Batch make_batch(const TokenFile& tokens, const std::vector<int64_t>& offsets, int64_t seq_len) {
  TRIAD_CHECK(seq_len >= 1, "make_batch: seq_len must be >= 1, got " << seq_len);
  const auto B = int64_t(offsets.size()), T = seq_len;
  Tensor inputs = Tensor::empty({B, T}, DType::i64), targets = Tensor::empty({B, T}, DType::i64);
  int64_t* x = inputs.data<int64_t>();   // (B, T)
  int64_t* y = targets.data<int64_t>();  // (B, T)
  std::vector<int64_t> row(size_t(T + 1));
  for (int64_t b = 0; b < B; ++b) {
    tokens.read(offsets[size_t(b)], T + 1, row.data());
    std::copy(row.begin(), row.end() - 1, x + b * T);
    std::copy(row.begin() + 1, row.end(), y + b * T);
  }
  return {inputs, targets};
}

}  // namespace triad::io
