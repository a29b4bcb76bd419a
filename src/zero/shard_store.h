// Where ZeRO keeps each flat group's f32 optimizer state: the master weights of mixed
// precision and Adam's two moments, over the elements the rank updates (its shard; stage 0:
// the whole group). ZeroOptimizer's stage logic reaches the state only through this
// interface, so a store in host memory or on NVMe (offload) replaces the one below without
// touching it. Today's store: memory on the training device.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace triad::zero {

// One group's state, 1-d f32 tensors of equal size.
struct ShardState {
  Tensor master;               // mixed precision's f32 weights; undefined in f32 training (the parameters are their own)
  Tensor exp_avg, exp_avg_sq;  // Adam's moments
};

class ShardStore {
 public:
  virtual ~ShardStore() = default;
  // Stores the state of the next group: master weights `master` (f32, on the training
  // device; undefined: none) and moments of `elements` zeros each. Returns the group's index
  // (0, 1, ... in the order groups are added).
  virtual size_t add(Tensor master, int64_t elements) = 0;
  // The group's state as tensors the optimizer's update and checkpoints read and write in
  // place: what is written through them is the stored state.
  virtual const ShardState& get(size_t group) const = 0;
  // Bytes of state held on the training device (the optimizer's share of its memory).
  virtual int64_t device_bytes() const = 0;
};

// Every group's state in memory on the training device, where the update reads it.
class DeviceShardStore : public ShardStore {
 public:
  explicit DeviceShardStore(Device device) : device_(device) {}

  size_t add(Tensor master, int64_t elements) override;
  const ShardState& get(size_t group) const override { return states_.at(group); }
  int64_t device_bytes() const override;

 private:
  Device device_;
  std::vector<ShardState> states_;
};

}  // namespace triad::zero
