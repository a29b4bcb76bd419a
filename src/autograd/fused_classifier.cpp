#include "autograd/fused_classifier.h"

#include <algorithm>

#include "autograd/flop_count.h"
#include "autograd/functions.h"
#include "autograd/record.h"
#include "autograd/weight_grad.h"
#include "tensor/ops.h"

namespace triad {

namespace {

// The rows of one chunk: chunk_rows, or those whose logits take about kClassifierChunkBytes.
int64_t rows_per_chunk(int64_t chunk_rows, const Tensor& weight) {
  if (chunk_rows > 0) return chunk_rows;
  const int64_t row_bytes = std::max<int64_t>(weight.size(0), 1) * int64_t(element_size(weight.dtype()));
  return std::max<int64_t>(kClassifierChunkBytes / row_bytes, 1);
}

// A part's classes resolved for W rows (or columns) of logits: {first, classes, vocab}.
struct Classes {
  int64_t first, count, vocab;
};
Classes classes_of(const ClassifierPart& part, int64_t W, const char* op) {
  const int64_t count = part.classes < 0 ? W : part.classes;
  const Classes c{part.first, count, part.vocab < 0 ? part.first + count : part.vocab};
  TRIAD_CHECK(c.first >= 0 && c.count <= W && (c.count == 0 || c.first + c.count <= c.vocab),
              op << ": the " << W << " rows of logits cannot hold classes [" << c.first << ", " << c.first + c.count
                 << ") of a vocabulary of " << c.vocab);
  return c;
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& targets, int64_t ignore_index,
                            const ClassifierPart& part, int64_t chunk_rows) {
  TRIAD_CHECK(weight.dim() == 2 && input.dim() >= 1 && input.size(-1) == weight.size(1) &&
                  targets.shape() == Shape(input.shape().begin(), input.shape().end() - 1),
              "linear_cross_entropy: expected x (..., C), weight (W, C) and targets (...), got "
                  << shape_str(input.shape()) << ", " << shape_str(weight.shape()) << " and "
                  << shape_str(targets.shape()));
  TRIAD_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be >= 0 (0: automatic), got " << chunk_rows);
  const int64_t W = weight.size(0), C = weight.size(1), N = targets.numel();
  const auto [first, classes, vocab] = classes_of(part, W, "linear_cross_entropy");
  const Tensor x = input.dtype() != weight.dtype() && is_16bit(weight.dtype()) ? to(input, weight.dtype()) : input;
  const Tensor x2 = ops::reshape(detach(x), {N, C});
  const Tensor t1 = ops::contiguous(ops::to(ops::reshape(targets, {N}), DType::i64));
  const int64_t chunk = rows_per_chunk(chunk_rows, weight);
  const DType stats = weight.dtype() == DType::f64 ? DType::f64 : DType::f32;

  const Tensor lse = Tensor::empty({N}, stats, weight.device());
  const Tensor target_logit = Tensor::empty({N}, stats, weight.device());
  for (int64_t s = 0; s < N; s += chunk) {
    const int64_t n = std::min(chunk, N - s);
    const Tensor logits = ops::matmul(ops::narrow(x2, 0, s, n), weight, false, true);
    ops::classifier_rows_(logits, ops::narrow(t1, 0, s, n), first, classes, vocab, ignore_index,
                          ops::narrow(lse, 0, s, n), ops::narrow(target_logit, 0, s, n));
  }
  if (part.combine) part.combine(lse, target_logit);
  const ops::CrossEntropyOut r = ops::classifier_loss(lse, target_logit, t1, vocab, ignore_index);
  flop_count::add(N * W * C, 2 * N * W * C);

  const bool gx = requires_grad(x), gw = requires_grad(weight);
  return record("linear_cross_entropy", {x, weight}, r.loss, [=, count = r.count](const Grads& g) {
    const Tensor xs = ops::reshape(x, {N, C});
    const Tensor dx = gx ? Tensor::empty({N, C}, x.dtype(), x.device()) : Tensor();
    // d(weight): added into the weight's .grad when it can take it (Note [Gradients added in
    // place]), else the first chunk's product with each later chunk's added to it.
    const Tensor into = gw ? grad_to_add_into(weight, weight.dtype()) : Tensor();
    Tensor dw = into;
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      const Tensor xc = ops::narrow(xs, 0, s, n);
      const Tensor dlogits = ops::matmul(xc, weight, false, true);
      ops::classifier_grad_(dlogits, ops::narrow(t1, 0, s, n), first, classes, vocab, ignore_index,
                            ops::narrow(lse, 0, s, n), g[0], count);
      if (gx) ops::copy_(ops::narrow(dx, 0, s, n), ops::matmul(dlogits, weight));
      if (gw && dw.defined())
        ops::add_matmul_(dw, dlogits, xc, true, false);
      else if (gw)
        dw = ops::matmul(dlogits, xc, true, false);
    }
    if (into.defined()) {
      grad_added_in_place(weight, /*in_pass=*/true);
      dw = Tensor();
    } else if (gw && !dw.defined()) {
      dw = Tensor::zeros({W, C}, weight.dtype(), weight.device());  // no rows
    }
    return Grads{gx ? ops::reshape(dx, x.shape()) : Tensor(), dw};
  });
}

Tensor cross_entropy_of_part(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const ClassifierPart& part) {
  TRIAD_CHECK(logits.dim() >= 1 && targets.shape() == Shape(logits.shape().begin(), logits.shape().end() - 1),
              "cross_entropy_of_part: logits " << shape_str(logits.shape()) << " do not match targets "
                                               << shape_str(targets.shape())
                                               << " (expected logits (..., W), targets (...))");
  const int64_t W = logits.size(-1), N = targets.numel();
  const auto [first, classes, vocab] = classes_of(part, W, "cross_entropy_of_part");
  const Tensor l2 = ops::contiguous(ops::reshape(detach(logits), {N, W}));
  const Tensor t1 = ops::contiguous(ops::to(ops::reshape(targets, {N}), DType::i64));
  const DType stats = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor lse = Tensor::empty({N}, stats, logits.device());
  const Tensor target_logit = Tensor::empty({N}, stats, logits.device());
  ops::classifier_rows_(l2, t1, first, classes, vocab, ignore_index, lse, target_logit);
  if (part.combine) part.combine(lse, target_logit);
  const ops::CrossEntropyOut r = ops::classifier_loss(lse, target_logit, t1, vocab, ignore_index);
  return record("cross_entropy_of_part", {logits}, r.loss,
                [=, shape = logits.shape(), count = r.count](const Grads& g) {
                  const Tensor d = ops::clone(l2);
                  ops::classifier_grad_(d, t1, first, classes, vocab, ignore_index, lse, g[0], count);
                  return Grads{ops::reshape(d, shape)};
                });
}

}  // namespace triad
