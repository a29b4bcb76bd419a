// Partial offload (offload_optimizer.device "cpu" with ratio below 1, DeepSpeed's
// "ZeRO-Offload++"): the first entries' state stays on the training device and is updated
// there, the rest lives in host memory and is updated there (zero/host_shard_store.h).
//
// Note [Partial offload]:
// - The split, per sub-group as DeepSpeed's stage 3 makes it: of its n sub-groups, in order,
//   sub-group i stays on the accelerator when i < int((1 − ratio)·n), and the others are
//   offloaded to CPU Adam; so ratio is the share of the state updated on the host (1: all,
//   0: none). DeepSpeed's sub-groups hold sub_group_size elements each (a parameter group's
//   last one fewer), so counting them counts elements. triad's entries differ in size (a
//   unit's biases and norms form a group far smaller than its matrices), so it counts the
//   elements: in the order of the entries, an entry whose elements end within (1 − ratio)
//   of the rank's state stays on the device, every later one goes to the host
//   (stays_on_device). With entries of equal size this is DeepSpeed's split.
// - With ratio below 1 ZeroOptimizer cuts groups into sub-groups of sub_group_size elements,
//   as for nvme: sub_group_size sets how finely the state splits.
// - Stages: DeepSpeed refuses ratio below 1 except at stage 3; triad's store is the same at
//   every stage that offloads, so it takes it at stages 1-3. Not with device "nvme"
//   (ZeroConfig::validate): DeepSpeed's swapper keeps every swappable sub-group in its files
//   whatever ratio says, only the optimizer that updates it changes.
// - The step: the device entries are updated as without offload (one multi-tensor call,
//   launched before the host entries' updates, so the device works while the host does), the
//   host entries as Note [Host optimizer step] says (their gradients staged, their new
//   parameters copied back). Both run the same arithmetic, so the run follows the run
//   without offload. A group's parameters are updated in place in host memory (Note
//   [Parameters updated in place]) only when every sub-group of it is on the host; the
//   delayed parameter update on a GPU needs every update on the host (ratio 1).
// - Memory: the device entries' master weights and moments count on the device
//   (device_bytes), the host entries' state and buffers in host memory (host_bytes; on a CPU
//   training device both are its memory: device_bytes). Checkpoints read and write entry by
//   entry, where each one lives: the one file format, whatever the ratio.
#pragma once

#include <cstdint>
#include <vector>

#include "zero/host_shard_store.h"
#include "zero/shard_store.h"

namespace triad::zero {

// Whether an entry whose elements end `end` elements into a rank's state of `total` stays
// on the training device under offload_optimizer.ratio `ratio` (Note [Partial offload]).
bool stays_on_device(int64_t end, int64_t total, double ratio);

class PartialOffloadStore : public ShardStore {
 public:
  // device, dtype, pinned: as HostShardStore's; ratio in [0, 1]; total: the elements of every
  // entry that will be added (the rank's state).
  PartialOffloadStore(Device device, DType dtype, bool pinned, double ratio, int64_t total);

  size_t add(Tensor master, int64_t elements) override;
  const ShardState& acquire(size_t entry) override { return side(entry).acquire(places_[entry].index); }
  void release(size_t entry, bool dirty) override { side(entry).release(places_[entry].index, dirty); }
  void prefetch(size_t) override {}
  Tensor read_part(size_t entry, ShardPart part) override { return side(entry).read_part(places_[entry].index, part); }
  void write_part(size_t entry, ShardPart part, const Tensor& values) override;
  int64_t device_bytes() const override { return device_.device_bytes() + host_.device_bytes(); }
  int64_t host_bytes() const override { return host_.host_bytes(); }
  bool resident(size_t entry) const override { return !places_.at(entry).host; }
  bool updates_on_host(size_t entry) const override { return places_.at(entry).host; }
  void stage(size_t entry, const Tensor& grad, const Tensor& params) override;
  void finish_update() override { host_.finish_update(); }
  void keep_params_in(size_t entry, const Tensor& host) override;

 private:
  struct Place {
    bool host;     // in host_, else in device_
    size_t index;  // its entry there
  };
  ShardStore& side(size_t entry);
  size_t host_index(size_t entry) const;  // asserts it is a host entry

  DeviceShardStore device_;
  HostShardStore host_;
  double ratio_;
  int64_t total_, added_ = 0;  // elements: all, and added so far
  std::vector<Place> places_;
};

}  // namespace triad::zero
