#include "parallel/tensor_parallel_layers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/functions.h"
#include "autograd/fused_classifier.h"
#include "autograd/record.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel_functions.h"
#include "tensor/ops.h"

namespace triad::parallel {

namespace {

// Draws the global tensor as the single-process layer would and keeps this rank's part.
Tensor uniform_part(const Shape& global, const nn::TensorSplit& split, const Shape& local, double bound,
                    Generator& gen) {
  const Tensor g = Tensor::empty(global);
  ops::uniform_(g, -bound, bound, gen);
  return nn::local_part(g, split, local);
}

LinearPart column_part(int64_t in, int64_t out, const Communicator& tp, const ColumnParallelOptions& o,
                       Generator& gen) {
  const int n = tp.size();
  TRIAD_CHECK(in > 0 && out > 0 && o.parts >= 1 && out % (int64_t(n) * o.parts) == 0,
              "ColumnParallelLinear: " << out << " output features (in " << o.parts << " part"
                                       << (o.parts > 1 ? "s" : "") << ") cannot be split over " << n
                                       << " tensor-parallel ranks");
  LinearPart p;
  p.weight_split = nn::split_along(0, n, tp.rank(), out, o.parts);
  const double bound = 1.0 / std::sqrt(double(in));
  p.weight = uniform_part({out, in}, p.weight_split, {out / n, in}, bound, gen);
  if (o.bias) {
    p.bias_split = p.weight_split;  // the same rows
    p.bias = uniform_part({out}, p.bias_split, {out / n}, bound, gen);
  }
  return p;
}

LinearPart row_part(int64_t in, int64_t out, const Communicator& tp, const RowParallelOptions& o, Generator& gen) {
  const int n = tp.size();
  TRIAD_CHECK(in > 0 && out > 0 && in % n == 0, "RowParallelLinear: " << in << " input features cannot be split over "
                                                                      << n << " tensor-parallel ranks");
  LinearPart p;
  p.weight_split = nn::split_along(1, n, tp.rank(), in);
  const double bound = 1.0 / std::sqrt(double(in));
  p.weight = uniform_part({out, in}, p.weight_split, {out, in / n}, bound, gen);
  if (o.bias) {
    p.bias = Tensor::empty({out});
    ops::uniform_(p.bias, -bound, bound, gen);
    p.bias_split.partial_grad = o.sequence_parallel;
  }
  return p;
}

}  // namespace

// ---- ColumnParallelLinear

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, CommunicatorPtr tp,
                                           const ColumnParallelOptions& o, Generator& gen)
    : ColumnParallelLinear(column_part(in, out, *tp, o, gen), tp, o) {}

ColumnParallelLinear::ColumnParallelLinear(LinearPart p, CommunicatorPtr tp, const ColumnParallelOptions& o)
    : nn::Linear("ColumnParallelLinear", p.weight, p.bias, p.weight_split, p.bias_split),
      options(o),
      tp_(std::move(tp)) {}

Tensor ColumnParallelLinear::whole_input(const Tensor& x) const {
  const bool sp = options.sequence_parallel && !nn::sequence_parallel_paused();
  return sp ? gather_from_sequence_region(x, tp_) : copy_to_tp_region(x, tp_);
}

Tensor ColumnParallelLinear::output(const Tensor& y) const {
  return options.gather_output ? gather_from_tp_region(y, tp_) : y;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) { return output(linear(whole_input(x), weight, bias)); }

Tensor ColumnParallelLinear::forward_gelu(const Tensor& x) { return output(linear_gelu(whole_input(x), weight, bias)); }

// ---- RowParallelLinear

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, CommunicatorPtr tp, const RowParallelOptions& o,
                                     Generator& gen)
    : RowParallelLinear(row_part(in, out, *tp, o, gen), tp, o) {}

RowParallelLinear::RowParallelLinear(LinearPart p, CommunicatorPtr tp, const RowParallelOptions& o)
    : nn::Linear("RowParallelLinear", p.weight, p.bias, p.weight_split, p.bias_split), options(o), tp_(std::move(tp)) {}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor input = options.input_is_parallel ? x : split_to_tp_region(x, tp_);
  const Tensor partial = linear(input, weight);
  const Tensor y = options.sequence_parallel && !nn::sequence_parallel_paused()
                       ? reduce_scatter_to_sequence_region(partial, tp_)
                       : reduce_from_tp_region(partial, tp_);
  return bias.defined() ? add(y, bias) : y;
}

Tensor RowParallelLinear::forward_gelu(const Tensor& x) { return gelu(forward(x)); }

// ---- VocabParallelEmbedding

namespace {

LinearPart embedding_part(int64_t vocab, int64_t dim, const Communicator& tp, int64_t pad_multiple, Generator& gen) {
  TRIAD_CHECK(vocab > 0 && dim > 0 && pad_multiple > 0,
              "VocabParallelEmbedding: sizes must be positive, got " << vocab << " x " << dim);
  const int64_t rows = vocab_rows_per_rank(vocab, tp.size(), pad_multiple);
  LinearPart p;
  p.weight_split = nn::split_along(0, tp.size(), tp.rank(), vocab);
  const Tensor g = Tensor::empty({vocab, dim});
  ops::normal_(g, 0.0, 1.0, gen);
  p.weight = nn::local_part(g, p.weight_split, {rows, dim});
  return p;
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(int64_t vocab_, int64_t dim, CommunicatorPtr tp, bool sp,
                                               int64_t pad_multiple, Generator& gen)
    : VocabParallelEmbedding(embedding_part(vocab_, dim, *tp, pad_multiple, gen), vocab_, tp, sp) {}

VocabParallelEmbedding::VocabParallelEmbedding(LinearPart p, int64_t vocab_, CommunicatorPtr tp, bool sp)
    : nn::Embedding("VocabParallelEmbedding", p.weight, p.weight_split),
      vocab(vocab_),
      first_row(int64_t(tp->rank()) * p.weight.size(0)),
      sequence_parallel(sp),
      tp_(std::move(tp)) {}

Tensor VocabParallelEmbedding::forward(const Tensor& indices) {
  // The other ranks' tokens read zeros (TableRows): nothing is read on the host.
  const Tensor partial = embedding(weight, ops::to(indices, weight.device()), {first_row, vocab});
  return sequence_parallel && !nn::sequence_parallel_paused() ? reduce_scatter_to_sequence_region(partial, tp_)
                                                              : reduce_from_tp_region(partial, tp_);
}

// ---- vocab-parallel cross-entropy

namespace {

// A rank's part of the vocabulary, rows [first_row, first_row + rows) of `vocab` (the last
// ranks' rows past the vocabulary are padding): each rank's per-row lse_r and target logit
// (0 off the rank) become lse = M + log Σ_r exp(lse_r - M), M = max_r lse_r, and the sum of
// the target logits: one all-reduce MAX and one SUM of (N,) vectors.
ClassifierPart vocab_part(const CommunicatorPtr& tp, int64_t first_row, int64_t rows, int64_t vocab) {
  const auto combine = [tp](const Tensor& lse, const Tensor& target_logit) {
    const Tensor m = ops::clone(lse);
    tp->all_reduce(m, ReduceOp::max)->wait();
    const Tensor sums = Tensor::empty({2, lse.numel()}, lse.dtype(), lse.device());
    ops::copy_(ops::select(sums, 0, 0), ops::exp(ops::sub(lse, m)));
    ops::copy_(ops::select(sums, 0, 1), target_logit);
    tp->all_reduce(sums)->wait();
    ops::copy_(lse, ops::add(m, ops::log(ops::select(sums, 0, 0))));
    ops::copy_(target_logit, ops::select(sums, 0, 1));
  };
  return {.first = first_row,
          .classes = std::clamp<int64_t>(vocab - first_row, 0, rows),
          .vocab = vocab,
          .combine = combine};
}

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const CommunicatorPtr& tp,
                                    int64_t first_row, int64_t vocab, int64_t ignore_index) {
  TRIAD_CHECK(logits.dim() >= 1 && first_row >= 0, "vocab_parallel_cross_entropy: expected logits (..., rows) from row "
                                                       << first_row << ", got " << shape_str(logits.shape()));
  return cross_entropy_of_part(logits, targets, ignore_index, vocab_part(tp, first_row, logits.size(-1), vocab));
}

Tensor vocab_parallel_linear_cross_entropy(const Tensor& x, const Tensor& table, const Tensor& targets,
                                           const CommunicatorPtr& tp, int64_t first_row, int64_t vocab,
                                           int64_t ignore_index, int64_t chunk_rows) {
  TRIAD_CHECK(table.dim() == 2 && first_row >= 0,
              "vocab_parallel_linear_cross_entropy: expected a table (rows, C) from row "
                  << first_row << " of a vocabulary of " << vocab << ", got " << shape_str(table.shape()));
  return linear_cross_entropy(x, table, targets, ignore_index, vocab_part(tp, first_row, table.size(0), vocab),
                              chunk_rows);
}

// ---- TensorParallel

TensorParallel::TensorParallel(CommunicatorPtr tp, bool sequence_parallel,
                               std::shared_ptr<const nn::ExpertExchange> experts)
    : nn::Parallelism(std::move(experts)), tp_(std::move(tp)), sequence_parallel_(sequence_parallel) {
  TRIAD_CHECK(tp_ != nullptr, "TensorParallel: the tensor-parallel communicator is null");
}

std::shared_ptr<nn::Linear> TensorParallel::column_linear(int64_t in, int64_t out, int parts, bool bias) const {
  return std::make_shared<ColumnParallelLinear>(
      in, out, tp_, ColumnParallelOptions{.bias = bias, .sequence_parallel = sequence_parallel_, .parts = parts});
}

std::shared_ptr<nn::Linear> TensorParallel::row_linear(int64_t in, int64_t out, bool bias) const {
  return std::make_shared<RowParallelLinear>(
      in, out, tp_, RowParallelOptions{.bias = bias, .sequence_parallel = sequence_parallel_});
}

std::shared_ptr<nn::Embedding> TensorParallel::token_embedding(int64_t vocab, int64_t dim, int64_t multiple) const {
  return std::make_shared<VocabParallelEmbedding>(vocab, dim, tp_, sequence_parallel_, multiple);
}

std::pair<int64_t, int64_t> TensorParallel::sequence_part(int64_t T) const {
  if (!sequence_parallel()) return {0, T};
  const int n = tp_->size();
  TRIAD_CHECK(T % n == 0, "sequence parallelism: the sequence length " << T << " is not divisible by the " << n
                                                                       << " tensor-parallel ranks");
  return {int64_t(tp_->rank()) * (T / n), T / n};
}

Tensor TensorParallel::on_whole_sequence(nn::Module& layer, const Tensor& x) const {
  if (!sequence_parallel()) return layer(x);
  return scatter_to_sequence_region(layer(gather_to_replicated_sequence(x, tp_)), tp_);
}

Tensor TensorParallel::tied_logits(const Tensor& x, const Tensor& table) const {
  return linear(sequence_parallel() ? gather_from_sequence_region(x, tp_) : copy_to_tp_region(x, tp_), table);
}

Tensor TensorParallel::whole_sequence(const Tensor& x) const {
  return sequence_parallel() ? gather_to_replicated_sequence(x, tp_) : x;
}

Tensor TensorParallel::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab) const {
  return vocab_parallel_cross_entropy(logits, targets, tp_, int64_t(tp_->rank()) * logits.size(-1), vocab);
}

Tensor TensorParallel::head_loss(const Tensor& x, const Tensor& table, const Tensor& targets, int64_t vocab) const {
  return vocab_parallel_linear_cross_entropy(
      sequence_parallel_ ? gather_from_sequence_region(x, tp_) : copy_to_tp_region(x, tp_), table, targets, tp_,
      int64_t(tp_->rank()) * table.size(0), vocab);
}

Tensor TensorParallel::full_logits(const Tensor& logits, int64_t vocab) const {
  const Tensor all = tp_ops::all_gather_last(logits, *tp_);
  return ops::contiguous(ops::narrow(all, all.dim() - 1, 0, vocab));
}

void TensorParallel::mark_residual_layer(nn::Module& layer) const {
  if (!sequence_parallel_) return;
  for (auto& [name, split] : layer.named_splits(/*recurse=*/false)) {
    split.partial_grad = true;
    layer.set_split(name, split);
  }
}

std::shared_ptr<const nn::Parallelism> layer_parallelism(const CommunicatorPtr& tp, bool sequence_parallel,
                                                         const CommunicatorPtr& ep) {
  const std::shared_ptr<const nn::ExpertExchange> experts =
      ep && ep->size() > 1 ? std::make_shared<ExpertParallel>(ep) : nn::local_experts();
  if (!tp || tp->size() == 1) return ep && ep->size() > 1 ? std::make_shared<nn::Parallelism>(experts) : nn::serial();
  return std::make_shared<TensorParallel>(tp, sequence_parallel, experts);
}

}  // namespace triad::parallel
