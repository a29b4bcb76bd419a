#include "nn/parallelism.h"

#include "autograd/functions.h"
#include "autograd/fused_classifier.h"
#include "tensor/ops.h"

namespace triad::nn {

namespace {
thread_local bool paused = false;
}  // namespace

SequenceParallelPause::SequenceParallelPause() : was_paused_(paused) { paused = true; }
SequenceParallelPause::~SequenceParallelPause() { paused = was_paused_; }
bool sequence_parallel_paused() { return paused; }

std::shared_ptr<Linear> Parallelism::column_linear(int64_t in_features, int64_t out_features, int, bool bias) const {
  return std::make_shared<Linear>(in_features, out_features, bias);
}

std::shared_ptr<Linear> Parallelism::row_linear(int64_t in_features, int64_t out_features, bool bias) const {
  return std::make_shared<Linear>(in_features, out_features, bias);
}

namespace {

// A table of `rows` >= vocab rows of which the first vocab are tokens: split over one rank,
// the rest padding (nn/tensor_split.h), zero.
class PaddedEmbedding : public Embedding {
 public:
  PaddedEmbedding(int64_t vocab, int64_t rows, int64_t dim)
      : Embedding("Embedding", Tensor::zeros({rows, dim}), split_along(0, 1, 0, vocab)) {}
};

}  // namespace

std::shared_ptr<Embedding> Parallelism::token_embedding(int64_t vocab, int64_t dim, int64_t multiple) const {
  const int64_t rows = vocab_rows_per_rank(vocab, 1, multiple);
  if (rows == vocab) return std::make_shared<Embedding>(vocab, dim);
  return std::make_shared<PaddedEmbedding>(vocab, rows, dim);
}

Tensor Parallelism::tied_logits(const Tensor& x, const Tensor& table) const { return linear(x, table); }

Tensor Parallelism::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab) const {
  return triad::cross_entropy(logits, targets, -100, vocab);  // padding columns are no classes
}

Tensor Parallelism::head_loss(const Tensor& x, const Tensor& table, const Tensor& targets, int64_t vocab) const {
  return linear_cross_entropy(x, table, targets, -100, {.classes = vocab, .combine = {}});
}

Tensor Parallelism::full_logits(const Tensor& logits, int64_t vocab) const {
  return logits.size(-1) == vocab ? logits : ops::contiguous(ops::narrow(logits, -1, 0, vocab));
}

const std::shared_ptr<const Parallelism>& serial() {
  static const std::shared_ptr<const Parallelism> p = std::make_shared<Parallelism>();
  return p;
}

}  // namespace triad::nn
