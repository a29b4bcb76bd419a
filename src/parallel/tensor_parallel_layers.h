// Tensor-parallel layers (Megatron-LM's), on the layer API and the Communicator of a
// tensor-parallel group, usable in any model: each rank holds its part of the weight
// (recorded as the parameter's TensorSplit), initialised as exactly its part of the
// weight the single-process layer would draw from the same generator.
//
// - ColumnParallelLinear (in -> out): weight (out/n, in), bias (out/n); rank r computes
//   output features [r·out/n, (r+1)·out/n) (of each of `parts` blocks: a fused q|k|v).
//   Input: whole on every rank (copy_to_tp_region), or with sequence_parallel the rank's
//   tokens, all-gathered along T. gather_output all-gathers the output features. While
//   sequence parallelism is paused (Note [Sequence parallelism paused] in nn/parallelism.h)
//   the layers built with sequence_parallel run as those built without.
// - RowParallelLinear (in -> out): weight (out, in/n), bias (out) replicated, added once
//   after the sum over ranks (all-reduce; with sequence_parallel a reduce-scatter along T,
//   leaving each rank its tokens). input_is_parallel: the input already holds the rank's
//   in/n features (a column-parallel layer's output); else it is split here.
// - VocabParallelEmbedding (vocab, dim): rows padded up to a multiple of n·pad_multiple and
//   split; ids outside a rank's rows look up zeros; the ranks' lookups are summed
//   (all-reduce; sequence_parallel: reduce-scatter along T).
// - vocab_parallel_cross_entropy: the mean cross-entropy of logits whose vocabulary is
//   split over the ranks, without gathering them: all-reduce MAX of each row's maximum,
//   one all-reduce SUM of each row's Σexp and target logit; padding columns (global index
//   >= vocab) never count; the backward is local. vocab_parallel_linear_cross_entropy: the
//   same loss fused with the head's projection, never holding the logits whole.
// - TensorParallel: the nn::Parallelism that builds a transformer from these;
//   layer_parallelism picks it for a group of more than one rank, nn::serial() otherwise
//   (with an expert-parallel group of more than one rank: the model's experts spread over
//   it, parallel/expert_parallel.h).
#pragma once

#include "nn/parallelism.h"
#include "parallel/communicator.h"

namespace triad::parallel {

// A layer's part of a weight and bias, made before its base class is built.
struct LinearPart {
  Tensor weight, bias;
  nn::TensorSplit weight_split, bias_split;
};

struct ColumnParallelOptions {
  bool bias = true;
  bool gather_output = false;
  bool sequence_parallel = false;
  int parts = 1;
};

class ColumnParallelLinear : public nn::Linear {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, CommunicatorPtr tp,
                       const ColumnParallelOptions& options = {}, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  // The rank's product, its bias and GELU fused (triad::linear_gelu) between the same
  // collectives as forward's: GELU acts on each output feature alone.
  Tensor forward_gelu(const Tensor& x) override;

  ColumnParallelOptions options;

 private:
  ColumnParallelLinear(LinearPart part, CommunicatorPtr tp, const ColumnParallelOptions& options);
  // The collectives around the rank's product: its whole input (gathered over the sequence
  // under sequence parallelism, unless paused), and its output (gathered when gather_output).
  Tensor whole_input(const Tensor& x) const;
  Tensor output(const Tensor& y) const;
  CommunicatorPtr tp_;
};

struct RowParallelOptions {
  bool bias = true;
  bool input_is_parallel = true;
  bool sequence_parallel = false;
};

class RowParallelLinear : public nn::Linear {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, CommunicatorPtr tp,
                    const RowParallelOptions& options = {}, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  // gelu(forward(x)): the GELU needs the sum over the ranks.
  Tensor forward_gelu(const Tensor& x) override;

  RowParallelOptions options;

 private:
  RowParallelLinear(LinearPart part, CommunicatorPtr tp, const RowParallelOptions& options);
  CommunicatorPtr tp_;
};

using nn::vocab_rows_per_rank;

class VocabParallelEmbedding : public nn::Embedding {
 public:
  VocabParallelEmbedding(int64_t vocab, int64_t dim, CommunicatorPtr tp, bool sequence_parallel = false,
                         int64_t pad_multiple = 64, Generator& gen = default_generator());
  Tensor forward(const Tensor& indices) override;

  int64_t vocab, first_row;  // this rank's rows are [first_row, first_row + weight.size(0))
  bool sequence_parallel;

 private:
  VocabParallelEmbedding(LinearPart part, int64_t vocab, CommunicatorPtr tp, bool sequence_parallel);
  CommunicatorPtr tp_;
};

// logits (..., rows) of this rank's vocabulary rows [first_row, first_row + rows) of a
// vocabulary of `vocab` tokens; targets (...) global ids or ignore_index, on the logits'
// device (cross_entropy_of_part: nothing is read on the host).
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const CommunicatorPtr& tp,
                                    int64_t first_row, int64_t vocab, int64_t ignore_index = -100);
// The same loss of the logits x table^T, table (rows, C) this rank's vocabulary rows, fused
// (Note [Fused classifier] in autograd/fused_classifier.h): each rank makes its rows' per-row
// log-sum-exp and target logit a chunk of rows at a time, one all-reduce MAX and one SUM of
// (N,) vectors make the whole vocabulary's, and the backward is local. x: the same on every
// rank (its gradient is this rank's part; copy_to_tp_region sums them).
Tensor vocab_parallel_linear_cross_entropy(const Tensor& x, const Tensor& table, const Tensor& targets,
                                           const CommunicatorPtr& tp, int64_t first_row, int64_t vocab,
                                           int64_t ignore_index = -100, int64_t chunk_rows = 0);

class TensorParallel : public nn::Parallelism {
 public:
  // experts: how the model's MoE layers spread their experts (nn::Parallelism::experts()).
  TensorParallel(CommunicatorPtr tp, bool sequence_parallel,
                 std::shared_ptr<const nn::ExpertExchange> experts = nn::local_experts());

  int ranks() const override { return tp_->size(); }
  bool sequence_parallel() const override { return sequence_parallel_ && !nn::sequence_parallel_paused(); }
  std::shared_ptr<nn::Linear> column_linear(int64_t in_features, int64_t out_features, int parts,
                                            bool bias) const override;
  std::shared_ptr<nn::Linear> row_linear(int64_t in_features, int64_t out_features, bool bias) const override;
  std::shared_ptr<nn::Embedding> token_embedding(int64_t vocab, int64_t dim, int64_t multiple) const override;
  Generator& region_generator() const override { return tensor_parallel_generator(); }
  // With sequence parallelism each rank's tokens are its own: their dropout too.
  Generator& residual_generator() const override {
    return sequence_parallel_ ? tensor_parallel_generator() : default_generator();
  }
  std::pair<int64_t, int64_t> sequence_part(int64_t T) const override;
  Tensor on_whole_sequence(nn::Module& layer, const Tensor& x) const override;
  Tensor whole_sequence(const Tensor& x) const override;
  Tensor tied_logits(const Tensor& x, const Tensor& table) const override;
  Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab) const override;
  Tensor head_loss(const Tensor& x, const Tensor& table, const Tensor& targets, int64_t vocab) const override;
  Tensor full_logits(const Tensor& logits, int64_t vocab) const override;
  void mark_residual_layer(nn::Module& layer) const override;

  const CommunicatorPtr& group() const { return tp_; }

 private:
  CommunicatorPtr tp_;
  bool sequence_parallel_;
};

// The layers of a model split over `tp`: TensorParallel for a group of more than one rank,
// nn::serial() for none (null) or a group of one; the experts of its MoE layers spread over
// `ep` (an ExpertParallel) when that group has more than one rank.
std::shared_ptr<const nn::Parallelism> layer_parallelism(const CommunicatorPtr& tp, bool sequence_parallel,
                                                         const CommunicatorPtr& ep = nullptr);

}  // namespace triad::parallel
