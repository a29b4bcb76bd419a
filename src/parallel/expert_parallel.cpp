#include "parallel/expert_parallel.h"

#include "autograd/record.h"
#include "tensor/ops.h"

namespace triad::parallel {

namespace ep_ops {

Tensor to_experts(const Tensor& slots, Communicator& ep) {
  const int n = ep.size();
  TRIAD_CHECK(slots.dim() == 3 && slots.size(0) % n == 0,
              "to_experts: expected slots (E, C, d) with E divisible by the " << n << " expert-parallel ranks, got "
                                                                             << shape_str(slots.shape()));
  const int64_t local = slots.size(0) / n, C = slots.size(1), d = slots.size(2);
  const Tensor received = Tensor::empty({n, local, C, d}, slots.dtype(), slots.device());  // by source rank
  ep.all_to_all(ops::contiguous(slots), received)->wait();
  return ops::reshape(ops::contiguous(ops::permute(received, {1, 0, 2, 3})), {local, n * C, d});
}

Tensor from_experts(const Tensor& outputs, Communicator& ep) {
  const int n = ep.size();
  TRIAD_CHECK(outputs.dim() == 3 && outputs.size(1) % n == 0,
              "from_experts: expected outputs (E/ep, ep C, d) for " << n << " expert-parallel ranks, got "
                                                                    << shape_str(outputs.shape()));
  const int64_t local = outputs.size(0), C = outputs.size(1) / n, d = outputs.size(2);
  // (E/n, n, C, d) -> (n, E/n, C, d): the rows of each source rank's tokens contiguous.
  const Tensor by_rank = ops::contiguous(ops::permute(ops::reshape(outputs, {local, n, C, d}), {1, 0, 2, 3}));
  Tensor returned = Tensor::empty({n * local, C, d}, outputs.dtype(), outputs.device());
  ep.all_to_all(by_rank, returned)->wait();
  return returned;
}

}  // namespace ep_ops

ExpertParallel::ExpertParallel(CommunicatorPtr ep) : ep_(std::move(ep)) {
  TRIAD_CHECK(ep_ != nullptr, "ExpertParallel: no expert-parallel communicator");
}

int64_t ExpertParallel::agree_capacity(int64_t capacity) const {
  if (ep_->size() == 1) return capacity;
  const Tensor c = Tensor::from_vector(std::vector<int64_t>{capacity}, {1});
  ep_->all_reduce(c, ReduceOp::max)->wait();
  return c.to_vector<int64_t>()[0];
}

Tensor ExpertParallel::to_experts(const Tensor& slots) const {
  if (ep_->size() == 1) return slots;
  return record("to_experts", {slots}, ep_ops::to_experts(slots, *ep_), [ep = ep_](const Grads& g) {
    return Grads{ep_ops::from_experts(ops::contiguous(g[0]), *ep)};
  });
}

Tensor ExpertParallel::from_experts(const Tensor& outputs) const {
  if (ep_->size() == 1) return outputs;
  return record("from_experts", {outputs}, ep_ops::from_experts(outputs, *ep_), [ep = ep_](const Grads& g) {
    return Grads{ep_ops::to_experts(ops::contiguous(g[0]), *ep)};
  });
}

}  // namespace triad::parallel
