// Where ZeRO keeps its f32 optimizer state: the master weights of mixed precision and
// Adam's two moments, over the elements the rank updates (its shard; stage 0: the whole
// group). ZeroOptimizer's stage logic reaches the state only through this interface, so a
// store in host memory or on NVMe (offload) replaces the one below without touching it.
//
// The state is stored as entries, each a sub-group: a range of one group's elements
// (ZeroOptimizer cuts groups by sub_group_size when the store swaps; otherwise an entry is
// a whole group). The optimizer step visits the entries in order, and each one is in
// memory only between acquire and release: a store that keeps the state elsewhere (a file,
// zero/nvme_shard_store.h) reads it in on acquire, writes it back on release, and may read
// the next entry ahead (prefetch) while the update works on this one. Checkpoints read
// and write one part of an entry at a time (read_part, write_part), so they never need more
// than one state's worth of memory.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace triad::zero {

// One entry's state, 1-d f32 tensors of equal size on the training device (a store that
// updates on the host: in host memory, Note [Host optimizer step] in zero/host_shard_store.h).
struct ShardState {
  Tensor master;               // mixed precision's f32 weights; undefined in f32 training (the parameters are their own)
  Tensor exp_avg, exp_avg_sq;  // Adam's moments
  Tensor grad;                 // a store that keeps gradients: the entry's gradient as accumulated (zeros when none came); else undefined
  Tensor params;               // a store that updates on the host: where the update writes the new 16-bit parameters; else undefined
};
enum class ShardPart { master, exp_avg, exp_avg_sq };

class ShardStore {
 public:
  virtual ~ShardStore() = default;
  // Stores the next entry: master weights `master` (f32, 1-d, on the training device;
  // undefined: none; the store may keep the tensor itself) and moments of `elements` zeros
  // each. Returns the entry's index (0, 1, ... in the order entries are added).
  virtual size_t add(Tensor master, int64_t elements) = 0;
  // The entry's state in memory, as tensors the update reads and writes in place, valid
  // until release(entry). One entry at a time is acquired.
  virtual const ShardState& acquire(size_t entry) = 0;
  // Done with the acquired entry; `dirty`: its tensors were written, store them.
  virtual void release(size_t entry, bool dirty) = 0;
  // An entry that will be acquired next (a store may start reading it).
  virtual void prefetch(size_t entry) = 0;
  // One part of an entry (no entry acquired): a tensor holding it. What a checkpoint writes
  // into it is stored by write_part(entry, part, tensor); the device store hands out its
  // own tensor, which write_part then leaves as it is.
  virtual Tensor read_part(size_t entry, ShardPart part) = 0;
  virtual void write_part(size_t entry, ShardPart part, const Tensor& values) = 0;
  // Note [Offloaded gradients] (zero/nvme_shard_store.h): a store may keep each entry's
  // reduced gradient beside its state, so that the rank's gradient shard is never in memory
  // whole. accumulate_gradient adds `values` (the entry's elements, in the training dtype) to
  // the entry's gradient, rounding the sum to that dtype as an in-memory shard of that dtype
  // would, and returns the sum in f32 (a tensor valid until the next call on the store);
  // acquire hands it out as ShardState::grad; clear_gradients makes every entry's zero.
  virtual bool keeps_gradients() const { return false; }
  virtual Tensor accumulate_gradient(size_t entry, const Tensor& values);
  virtual void clear_gradients() {}
  // Bytes of state held on the training device (the optimizer's share of its memory).
  virtual int64_t device_bytes() const = 0;
  // Bytes held in host memory apart from the training device's (a GPU's swap buffers), and
  // in files.
  virtual int64_t host_bytes() const { return 0; }
  virtual int64_t file_bytes() const { return 0; }
  // Whether acquire hands out tensors of `entry` that stay on the training device after
  // release (the device store's): the update may then take such entries in one call (one
  // launch on a GPU).
  virtual bool resident(size_t /*entry*/) const { return false; }
  // Note [Host optimizer step] (zero/host_shard_store.h): an entry whose state is in host
  // memory apart from the training device is updated there (a store may hold some entries
  // on the device and the others on the host: Note [Partial offload] in
  // zero/partial_offload_store.h). Before such an entry is acquired, stage() hands it the
  // entry's gradient (f32, unscaled and clipped) and the parameters the update writes
  // (training dtype), both on the training device, and the store starts copying what it
  // reads to the host; acquire waits for them and hands out host tensors (master always
  // defined: in f32 training a copy of the parameters; params the 16-bit parameters' host
  // buffer); release starts copying the new parameters back; and after the last entry
  // finish_update() orders the training device's later work after those copies.
  virtual bool updates_on_host(size_t /*entry*/) const { return false; }
  virtual void stage(size_t entry, const Tensor& grad, const Tensor& params);
  virtual void finish_update() {}
  // Note [Parameters updated in place] (zero/host_shard_store.h): an entry updated on the
  // host has its new parameters (training dtype; in f32 training they are the master
  // weights it reads too) written straight into `host`, host memory where the caller keeps
  // them (offloaded parameters' buffer), from then on: stage() is handed no parameters,
  // acquire hands `host` out (as master in f32 training, else as params) and release copies
  // nothing back. The caller keeps `host` unread and unwritten from stage to release.
  virtual void keep_params_in(size_t entry, const Tensor& host);
};

// Every entry's state in memory on the training device, where the update reads it:
// acquiring and releasing cost nothing.
class DeviceShardStore : public ShardStore {
 public:
  explicit DeviceShardStore(Device device) : device_(device) {}

  size_t add(Tensor master, int64_t elements) override;
  const ShardState& acquire(size_t entry) override { return states_.at(entry); }
  void release(size_t, bool) override {}
  void prefetch(size_t) override {}
  Tensor read_part(size_t entry, ShardPart part) override;
  void write_part(size_t entry, ShardPart part, const Tensor& values) override;
  int64_t device_bytes() const override;
  bool resident(size_t) const override { return true; }

 private:
  Device device_;
  std::vector<ShardState> states_;
};

// The tensor of `part` in `state`.
const Tensor& part_of(const ShardState& state, ShardPart part);

}  // namespace triad::zero
