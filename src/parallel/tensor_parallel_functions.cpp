#include "parallel/tensor_parallel_functions.h"

#include "autograd/record.h"
#include "tensor/ops.h"

namespace triad::parallel {

namespace tp_ops {

namespace {

void check_divisible(const Tensor& x, int64_t dim, int n, const char* what) {
  TRIAD_CHECK(x.dim() > dim && x.size(dim) % n == 0, what << ": dimension " << dim << " of "
                                                          << shape_str(x.shape()) << " is not divisible by the "
                                                          << n << " tensor-parallel ranks");
}

// x as (B, T, rest), rest the product of the dimensions after T.
Shape as_btr(const Tensor& x) {
  TRIAD_CHECK(x.dim() >= 2, "sequence-parallel collective: expected (B, T, ...), got " << shape_str(x.shape()));
  return {x.size(0), x.size(1), x.numel() / std::max<int64_t>(1, x.size(0) * x.size(1))};
}

}  // namespace

Tensor all_reduce(const Tensor& x, Communicator& tp) {
  Tensor y = ops::clone(x);
  if (tp.size() > 1) tp.all_reduce(y)->wait();
  return y;
}

Tensor all_gather_last(const Tensor& x, Communicator& tp) {
  const int n = tp.size();
  if (n == 1) return x;
  const int64_t c = x.size(-1), rows = x.numel() / c;
  const Tensor gathered = Tensor::empty({n, rows, c}, x.dtype(), x.device());  // rank-major
  tp.all_gather(ops::contiguous(x), gathered)->wait();
  Shape out = x.shape();
  out.back() = n * c;
  return ops::reshape(ops::contiguous(ops::permute(gathered, {1, 0, 2})), out);
}

Tensor slice_last(const Tensor& x, Communicator& tp) {
  check_divisible(x, x.dim() - 1, tp.size(), "split_to_tp_region");
  const int64_t c = x.size(-1) / tp.size();
  return ops::contiguous(ops::narrow(x, x.dim() - 1, tp.rank() * c, c));
}

Tensor all_gather_seq(const Tensor& x, Communicator& tp) {
  const int n = tp.size();
  if (n == 1) return x;
  const Shape s = as_btr(x);
  const Tensor gathered = Tensor::empty({n, s[0], s[1], s[2]}, x.dtype(), x.device());
  tp.all_gather(ops::contiguous(x), gathered)->wait();
  Shape out = x.shape();
  out[1] = n * s[1];
  return ops::reshape(ops::contiguous(ops::permute(gathered, {1, 0, 2, 3})), out);
}

Tensor reduce_scatter_seq(const Tensor& x, Communicator& tp) {
  const int n = tp.size();
  if (n == 1) return ops::clone(x);
  check_divisible(x, 1, n, "reduce_scatter_to_sequence_region");
  const Shape s = as_btr(x);
  const int64_t t = s[1] / n;
  // (B, n, t, rest) -> (n, B, t, rest): each rank's chunk contiguous.
  const Tensor chunks = ops::contiguous(ops::permute(ops::reshape(x, {s[0], n, t, s[2]}), {1, 0, 2, 3}));
  Shape out = x.shape();
  out[1] = t;
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  tp.reduce_scatter(chunks, y)->wait();
  return y;
}

Tensor slice_seq(const Tensor& x, Communicator& tp) {
  check_divisible(x, 1, tp.size(), "scatter_to_sequence_region");
  const int64_t t = x.size(1) / tp.size();
  return ops::contiguous(ops::narrow(x, 1, tp.rank() * t, t));
}

}  // namespace tp_ops

namespace {

// A new tensor sharing x's storage, for functions whose forward is the identity.
Tensor alias(const Tensor& x) { return ops::view(ops::contiguous(x), x.shape()); }

}  // namespace

Tensor copy_to_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  if (tp->size() == 1) return x;
  return record("copy_to_tp_region", {x}, alias(x),
                [tp](const Grads& g) { return Grads{tp_ops::all_reduce(g[0], *tp)}; });
}

Tensor reduce_from_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  if (tp->size() == 1) return x;
  return record("reduce_from_tp_region", {x}, tp_ops::all_reduce(x, *tp), [](const Grads& g) { return Grads{g[0]}; });
}

Tensor split_to_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  if (tp->size() == 1) return x;
  return record("split_to_tp_region", {x}, tp_ops::slice_last(x, *tp),
                [tp](const Grads& g) { return Grads{tp_ops::all_gather_last(g[0], *tp)}; });
}

Tensor gather_from_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  if (tp->size() == 1) return x;
  return record("gather_from_tp_region", {x}, tp_ops::all_gather_last(x, *tp),
                [tp](const Grads& g) { return Grads{tp_ops::slice_last(g[0], *tp)}; });
}

Tensor scatter_to_sequence_region(const Tensor& x, const CommunicatorPtr& tp) {
  if (tp->size() == 1) return x;
  return record("scatter_to_sequence_region", {x}, tp_ops::slice_seq(x, *tp),
                [tp](const Grads& g) { return Grads{tp_ops::all_gather_seq(g[0], *tp)}; });
}

Tensor gather_from_sequence_region(const Tensor& x, const CommunicatorPtr& tp) {
  if (tp->size() == 1) return x;
  return record("gather_from_sequence_region", {x}, tp_ops::all_gather_seq(x, *tp),
                [tp](const Grads& g) { return Grads{tp_ops::reduce_scatter_seq(g[0], *tp)}; });
}

Tensor reduce_scatter_to_sequence_region(const Tensor& x, const CommunicatorPtr& tp) {
  if (tp->size() == 1) return x;
  return record("reduce_scatter_to_sequence_region", {x}, tp_ops::reduce_scatter_seq(x, *tp),
                [tp](const Grads& g) { return Grads{tp_ops::all_gather_seq(g[0], *tp)}; });
}

}  // namespace triad::parallel
