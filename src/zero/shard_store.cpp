#include "zero/shard_store.h"

#include <utility>

namespace triad::zero {

size_t DeviceShardStore::add(Tensor master, int64_t elements) {
  TRIAD_ASSERT(!master.defined() || (master.numel() == elements && master.dtype() == DType::f32 &&
                                     master.device() == device_));
  states_.push_back({std::move(master), Tensor::zeros({elements}, DType::f32, device_),
                     Tensor::zeros({elements}, DType::f32, device_)});
  return states_.size() - 1;
}

int64_t DeviceShardStore::device_bytes() const {
  int64_t bytes = 0;
  for (const ShardState& s : states_)
    for (const Tensor* t : {&s.master, &s.exp_avg, &s.exp_avg_sq})
      if (t->defined()) bytes += t->numel() * int64_t(element_size(t->dtype()));
  return bytes;
}

}  // namespace triad::zero
