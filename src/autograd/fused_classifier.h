// The fused classifier: a language model's output projection and its cross-entropy loss in
// one differentiable function, so that training never holds the (rows, vocabulary) logits
// nor their gradient whole (Note [Fused classifier]). Generation and evaluation, which want
// the logits themselves, keep linear + cross_entropy.
#pragma once

#include <functional>

#include "tensor/tensor.h"

namespace triad {

// Note [Fused classifier]: the loss of a head whose logits nothing else reads,
//   loss = cross_entropy(x weight^T, targets),
// made a chunk of rows at a time. The forward computes each chunk's logits (one GEMM),
// keeps only each row's log-sum-exp and target logit, and frees them; the backward
// recomputes each chunk's logits (one more GEMM, as flash attention recomputes its scores),
// turns them in place into d(loss)/d(logits) = (softmax - onehot) g / count, and feeds that
// at once to the chunk's two gradient GEMMs: dx's rows and an accumulated d(weight). At
// most one chunk of logits exists at a time, where linear + cross_entropy held the logits
// from the forward to the backward and a second tensor of their size for the gradient.
//
// Why recompute rather than write the gradient in the forward's pass (llm.c's single pass):
// the loss's incoming gradient g is known only in the backward. The loss scaler multiplies
// it by its scale, gradient accumulation by 1/steps, and a loss may be one term of a
// weighted sum (distillation, RLHF); a gradient made at g = 1 and scaled later would lose
// the loss scaler's range (softmax / count is about 1e-9 at GPT-2's vocabulary and a
// batch of 8k tokens, below f16's smallest subnormal), and keeping d(x) and d(weight) from
// the forward would hold a weight-sized buffer through the whole backward. The price is
// one GEMM of 2·rows·C·V flops: a third more than the head's 6·rows·C·V, about 10% of a
// GPT-2 124M step's flops.
//
// The loss equals cross_entropy's: the same per-row log-sum-exp and target logit, summed in
// f64. The gradients equal linear + cross_entropy's up to the order in which d(weight) sums
// its rows (per chunk, then over chunks). Each chunk's d(weight) is added into the sum of
// the chunks before it by one accumulating GEMM (ops::add_matmul_), and into the weight's
// .grad itself when it has one (Note [Gradients added in place] in autograd/weight_grad.h);
// with 16-bit weights the sum is kept in the weight's dtype, so that a step converts nothing
// (Note [16-bit activations] in functions.cpp): one rounding of half a ulp per chunk where
// linear's backward rounds once.
//
// A tensor-parallel head (parallel/tensor_parallel_layers.h) holds a part of the
// vocabulary's rows on each rank: each rank makes its part's per-row log-sum-exp and target
// logit, ClassifierPart::combine turns them into the whole vocabulary's (a MAX and one SUM
// all-reduce of (rows,) vectors, never the logits), and each rank's backward is local.
struct ClassifierPart {
  int64_t first = 0;     // the class of weight's row 0
  int64_t classes = -1;  // weight's first `classes` rows are classes, the rest padding (-1: all)
  int64_t vocab = -1;    // the classes of the whole vocabulary (-1: first + classes)
  // Turns this part's per-row lse and target_logit ((rows,), f32 or f64) into the whole
  // vocabulary's, in place; empty when the part is the whole vocabulary.
  std::function<void(const Tensor& lse, const Tensor& target_logit)> combine;
};

// A chunk of about this many bytes of logits (in their dtype) at a time, by default: about
// 166 rows of GPT-2's 50304 f32 columns.
inline constexpr int64_t kClassifierChunkBytes = int64_t(32) << 20;

// Mean cross-entropy of the logits x weight^T (x (..., C), weight (W, C)) against targets
// (...) of i64/i32 on x's device, skipping ignore_index, as cross_entropy(linear(x, weight),
// targets, ignore_index, classes) (Note [Fused classifier]). chunk_rows: the rows of
// logits made at a time (0: those of about kClassifierChunkBytes). x of another dtype than
// a 16-bit weight is narrowed to it first, as linear does. The loss is f32 (f64 for f64
// weights); the gradients come back in the dtypes of x and weight.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100,
                            const ClassifierPart& part = {}, int64_t chunk_rows = 0);

// The same loss of logits already made (..., W), whose columns are the part's classes (then
// padding): each row's log-sum-exp and target logit, combined over the parts by
// part.combine; the backward is local, d(logits) in their dtype. A tensor-parallel
// cross-entropy of a head that is not fused (parallel::vocab_parallel_cross_entropy).
Tensor cross_entropy_of_part(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const ClassifierPart& part);

}  // namespace triad
