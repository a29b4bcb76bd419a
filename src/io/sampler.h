// Batches of training sequences drawn from a TokenFile.
//
// Note [Global batch]: the global batch of step k depends only on (seed, k), never on the
// number of ranks or on what was drawn before, so every parallel layout and every resumed
// run sees the same tokens. Each row's start offset is a hash of (seed, step, row), drawn
// uniformly (with replacement) from the valid starts of the range. A data-parallel rank r
// with b rows per rank takes rows [r*b, (r+1)*b) of the global batch: offsets(step, B)
// computed anywhere agrees row for row.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "io/token_file.h"
#include "tensor/tensor.h"

namespace triad::io {

struct TokenRange {
  int64_t begin = 0, end = 0;  // [begin, end) of a TokenFile
  int64_t size() const { return end - begin; }
};

// Train = [0, n - v), val = [n - v, n), v = round(n * val_fraction): validation is the last
// fraction of the tokens. Whether val holds at least seq_len + 1 tokens is the caller's check.
// Throws Error when n_tokens < 0 or val_fraction is not in [0, 0.5].
std::pair<TokenRange, TokenRange> split_train_val(int64_t n_tokens, double val_fraction);

class BatchSampler {
 public:
  // Throws Error when seq_len < 1, the range is inverted or starts below 0, or it holds fewer
  // than seq_len + 1 tokens (one sequence plus its last target).
  BatchSampler(TokenRange range, int64_t seq_len, uint64_t seed);

  // `batch` start offsets in [begin, end - seq_len - 1]; row i is a pure function of
  // (seed, step, i) (Note [Global batch]). Throws Error when step < 0 or batch < 0.
  std::vector<int64_t> offsets(int64_t step, int64_t batch) const;

  TokenRange range() const { return range_; }
  int64_t seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }

 private:
  TokenRange range_;
  int64_t seq_len_;
  uint64_t seed_;
};

// (B, T) int64 tensors: inputs[i] = tokens[offsets[i], offsets[i] + T), targets[i] the same
// shifted by one token. Throws Error naming the file when a sequence runs past its end.
struct Batch {
  Tensor inputs, targets;
};
Batch make_batch(const TokenFile& tokens, const std::vector<int64_t>& offsets, int64_t seq_len);

}  // namespace triad::io
