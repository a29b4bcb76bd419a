#include "zero/shard_store.h"

#include <utility>

#include "tensor/ops.h"

namespace triad::zero {

const Tensor& part_of(const ShardState& state, ShardPart part) {
  switch (part) {
    case ShardPart::master:
      return state.master;
    case ShardPart::exp_avg:
      return state.exp_avg;
    case ShardPart::exp_avg_sq:
      return state.exp_avg_sq;
  }
  TRIAD_ASSERT(false);
}

Tensor ShardStore::accumulate_gradient(size_t, const Tensor&) {
  TRIAD_ASSERT(false && "a store that keeps no gradients was handed one");
  return {};
}

void ShardStore::stage(size_t, const Tensor&, const Tensor&) {
  TRIAD_ASSERT(false && "a store that updates on the training device was staged");
}

void ShardStore::keep_params_in(size_t, const Tensor&) {
  TRIAD_ASSERT(false && "a store that updates on the training device was handed host parameters");
}

size_t DeviceShardStore::add(Tensor master, int64_t elements) {
  TRIAD_ASSERT(!master.defined() || (master.numel() == elements && master.dtype() == DType::f32 &&
                                     master.device() == device_));
  states_.push_back({std::move(master), Tensor::zeros({elements}, DType::f32, device_),
                     Tensor::zeros({elements}, DType::f32, device_), Tensor(), Tensor()});
  return states_.size() - 1;
}

Tensor DeviceShardStore::read_part(size_t entry, ShardPart part) { return part_of(states_.at(entry), part); }

void DeviceShardStore::write_part(size_t entry, ShardPart part, const Tensor& values) {
  const Tensor& stored = part_of(states_.at(entry), part);
  if (!values.is_same(stored)) ops::copy_(stored, values);
}

int64_t DeviceShardStore::device_bytes() const {
  int64_t bytes = 0;
  for (const ShardState& s : states_)
    for (const Tensor* t : {&s.master, &s.exp_avg, &s.exp_avg_sq})
      if (t->defined()) bytes += t->numel() * int64_t(element_size(t->dtype()));
  return bytes;
}

}  // namespace triad::zero
