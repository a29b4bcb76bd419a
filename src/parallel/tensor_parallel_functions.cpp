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

using Collective = Tensor (*)(const Tensor&, Communicator&);

// A new tensor sharing x's storage, for functions whose forward is the identity.
Tensor alias(const Tensor& x, Communicator&) { return ops::view(ops::contiguous(x), x.shape()); }
Tensor pass(const Tensor& g, Communicator&) { return g; }

// A conjugate function: `forward` on x, `backward` on its gradient; the identity on one rank.
Tensor conjugate(const char* name, const Tensor& x, const CommunicatorPtr& tp, Collective forward,
                 Collective backward) {
  if (tp->size() == 1) return x;
  return record(name, {x}, forward(x, *tp), [tp, backward](const Grads& g) { return Grads{backward(g[0], *tp)}; });
}

}  // namespace

Tensor copy_to_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("copy_to_tp_region", x, tp, alias, tp_ops::all_reduce);
}
Tensor reduce_from_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("reduce_from_tp_region", x, tp, tp_ops::all_reduce, pass);
}
Tensor split_to_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("split_to_tp_region", x, tp, tp_ops::slice_last, tp_ops::all_gather_last);
}
Tensor gather_from_tp_region(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("gather_from_tp_region", x, tp, tp_ops::all_gather_last, tp_ops::slice_last);
}
Tensor scatter_to_sequence_region(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("scatter_to_sequence_region", x, tp, tp_ops::slice_seq, tp_ops::all_gather_seq);
}
Tensor gather_from_sequence_region(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("gather_from_sequence_region", x, tp, tp_ops::all_gather_seq, tp_ops::reduce_scatter_seq);
}
Tensor reduce_scatter_to_sequence_region(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("reduce_scatter_to_sequence_region", x, tp, tp_ops::reduce_scatter_seq, tp_ops::all_gather_seq);
}
Tensor gather_to_replicated_sequence(const Tensor& x, const CommunicatorPtr& tp) {
  return conjugate("gather_to_replicated_sequence", x, tp, tp_ops::all_gather_seq, tp_ops::slice_seq);
}

}  // namespace triad::parallel
