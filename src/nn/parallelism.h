// Parallelism: how a transformer's layers are split over the ranks of a tensor-parallel
// group, and how activations cross between the ranks. The layer code (transformer.h, gpt.h)
// asks it for its linear layers, embeddings and head and stays the same whatever the split;
// this base class is the single-process model, and parallel::TensorParallel
// (parallel/tensor_parallel_layers.h) the Megatron-LM split with optional sequence
// parallelism.
//
// The split of a block (Megatron's): the residual stream is whole on every rank (with
// sequence parallelism: each rank holds T/ranks of its tokens); a column-parallel layer
// reads it and leaves each rank its own output features (attention heads, MLP hidden
// units); a row-parallel layer takes those and returns the residual stream, summed over
// the ranks. Dropout inside that region draws from region_generator() (a stream per
// rank); on the residual stream from residual_generator().
//
// Note [Sequence parallelism paused]: generation gives every rank of a tensor-parallel group
// the same tokens, a column at a time, which no split of the sequence fits. While a
// SequenceParallelPause lives on a thread, a model built with sequence parallelism runs there
// as one built without it (the weights are the same; only where activations live differs):
// sequence_parallel() is false, and the layers keep the residual stream whole on every rank.
// For forwards without gradients only (the gradients of parameters marked partial_grad
// would come back whole on every rank, then be summed over them); the language models'
// forward_cached holds one.
//
// It also carries how the experts of the model's MoE layers are spread (experts(), Note
// [Expert parallelism] in nn/expert_exchange.h): every expert in this process unless built
// with an expert-parallel exchange.
//
// A Parallelism is made by std::make_shared: the blocks keep the one they were built with.
#pragma once

#include <memory>

#include "nn/expert_exchange.h"
#include "nn/layers.h"

namespace triad::nn {

class Parallelism : public std::enable_shared_from_this<Parallelism> {
 public:
  explicit Parallelism(std::shared_ptr<const ExpertExchange> experts = local_experts())
      : experts_(std::move(experts)) {}
  virtual ~Parallelism() = default;

  virtual int ranks() const { return 1; }
  // Whether the residual stream is split along the sequence now (false while paused).
  virtual bool sequence_parallel() const { return false; }

  // Output features split over the ranks; `parts` blocks of out_features (q|k|v: 3) each
  // split on its own. Input: the residual stream. Without `bias` the layer has none.
  virtual std::shared_ptr<Linear> column_linear(int64_t in_features, int64_t out_features, int parts = 1,
                                                bool bias = true) const;
  // Input features split over the ranks; output: the residual stream.
  virtual std::shared_ptr<Linear> row_linear(int64_t in_features, int64_t out_features, bool bias = true) const;
  // A token table (vocab, dim) whose rows may be split, and padded to a multiple of
  // multiple × ranks(); output: the residual stream.
  virtual std::shared_ptr<Embedding> token_embedding(int64_t vocab, int64_t dim, int64_t multiple = 1) const;
  virtual Generator& region_generator() const { return default_generator(); }
  virtual Generator& residual_generator() const { return default_generator(); }

  // The tokens [first, first + count) of a sequence of T the residual stream of this rank
  // holds.
  virtual std::pair<int64_t, int64_t> sequence_part(int64_t T) const { return {0, T}; }
  // Logits of the residual stream x against the token table's rows this rank holds
  // (a tied output head): (B, T, rows).
  virtual Tensor tied_logits(const Tensor& x, const Tensor& table) const;
  // Mean cross-entropy of such logits against targets (B, T) over a vocabulary of `vocab`
  // (padding rows excluded), skipping -100.
  virtual Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab) const;
  // The same loss of the logits tied_logits(x, table) would make, fused (Note [Fused
  // classifier] in autograd/fused_classifier.h): made a chunk of rows at a time, never held
  // whole, for training. table: this rank's rows of a tied token table or of a column-split
  // head's weight.
  virtual Tensor head_loss(const Tensor& x, const Tensor& table, const Tensor& targets, int64_t vocab) const;
  // The full (B, T, vocab) logits from such logits (no gradient; generation).
  virtual Tensor full_logits(const Tensor& logits, int64_t vocab) const;
  // `layer` (a module every rank of the group holds whole, e.g. an MoE layer) on the tokens
  // of the residual stream x: with sequence parallelism, run on the whole sequence gathered
  // from the ranks, the same on each (its gradient too), of which this rank keeps its own
  // tokens' part; otherwise layer(x).
  virtual Tensor on_whole_sequence(Module& layer, const Tensor& x) const { return layer(x); }
  // Values x (B, t, ...) of this rank's tokens of the residual stream, as the whole sequence
  // (B, T, ...) on every rank, the same on each: what a computation every rank runs alike on
  // the whole sequence reads (a value head's loss, a score read at one token). Its backward
  // keeps this rank's tokens' part of the gradient, which such a computation leaves whole and
  // the same on every rank. Without sequence parallelism: x.
  virtual Tensor whole_sequence(const Tensor& x) const { return x; }
  // Marks the parameters of a layer on the residual stream whose gradients sequence
  // parallelism leaves partial on each rank (TensorSplit::partial_grad).
  virtual void mark_residual_layer(Module&) const {}
  // The exchange the model's MoE layers spread their experts over.
  const std::shared_ptr<const ExpertExchange>& experts() const { return experts_; }

 private:
  std::shared_ptr<const ExpertExchange> experts_;
};

// The single-process model's.
const std::shared_ptr<const Parallelism>& serial();

// Note [Sequence parallelism paused]: pauses it on this thread while it lives (nests).
class SequenceParallelPause {
 public:
  SequenceParallelPause();
  ~SequenceParallelPause();
  SequenceParallelPause(const SequenceParallelPause&) = delete;
  SequenceParallelPause& operator=(const SequenceParallelPause&) = delete;

 private:
  bool was_paused_;
};
// Whether a SequenceParallelPause lives on this thread.
bool sequence_parallel_paused();

}  // namespace triad::nn
