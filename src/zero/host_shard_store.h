// A shard store in host memory (offload_optimizer.device "cpu" on a GPU: ZeRO-Offload,
// arXiv 2101.06840): the master weights and Adam's moments of the rank's shard live on the
// host, and the update runs there, with the CPU backend's Adam (OpenMP, vectorized).
//
// Note [Host optimizer step]:
// - State: per entry (a flat group's shard), the f32 master weights (mixed precision) and
//   both moments, an f32 gradient buffer, and the new parameters' buffer in the training
//   dtype; in f32 training the master buffer receives a copy of the parameters at each step
//   instead (the parameters stay their own master weights: a checkpoint reads and writes
//   them on the device, as without offload). With pin_memory every buffer is pinned
//   (zero/host_copies.h) and the copies below are queued on the device's communication
//   stream; without it (DeepSpeed's default) each copy waits.
// - A step: ZeroOptimizer::step reduces, unscales, measures and clips the gradients on the
//   device as without offload, then stages every entry at once: each entry's gradient (f32)
//   (and, in f32 training, its parameters) is queued for the host. The update takes the
//   entries in order: acquire waits for that entry's copies only, so the copies of the later
//   entries run while Adam works on the earlier ones; release queues the new parameters
//   (16-bit, or the f32 master weights) to the device parameters staged for it, overlapping
//   the next entry's Adam. finish_update() makes the device's current stream wait for those
//   copies (the all-gather of the new parameters and the next forward come after them);
//   the host never waits for them. A buffer a copy still reads is written again only after
//   that copy (the next step waits for it).
// - Why the gradients cross at the step, clipped, rather than as each reduction completes in
//   the backward: Adam on the host is slower than the bus, so with every copy queued at once
//   only the first entry's is not hidden; the norm, the unscaling and clipping stay on the
//   device, in the arithmetic of the run without offload; and a gradient is final only after
//   the step's sums (tied parameters, tensor-parallel partial sums), whatever the layout.
// - The arithmetic is the device update's (tensor/optimizer_math.h) on the same f32 values,
//   so a run with the state on the host follows the run without offload (on the CPU, bit
//   for bit).
// - Note [Parameters updated in place]: with offload_param "cpu" too (ZeRO-3), an offloaded
//   group's parameter shard already lives in host memory (zero/param_host_backend.h), and
//   the entry's update writes its new parameters there: the store keeps that buffer as its
//   own (keep_params_in; in f32 training as the master buffer, which the update reads and
//   writes), so the shard is neither brought onto the device for the update nor copied back
//   and written out after it; only its gradient crosses, staged with every other entry's.
//   The parameter swap holds no transfer of the shard during the step (ZeroOptimizer waits
//   for a checkpoint's write before it), and the next gather reads what the update wrote.
//   Per step and shard of n elements of e bytes it saves two host-to-device copies of n·e
//   bytes (the shard in, the new values out of the store) and one device-to-host (the
//   write-back), in f32 a second one (the master weights' copy in): 6n bytes over the bus
//   in bf16, 16n in f32; and the host holds n·e bytes less (the store's own buffer). With
//   offload_param "nvme" in mixed precision the buffer is a host buffer of ZeroOptimizer's,
//   which the swap writes to the file from (ParamSwap::store_from): the shard never comes
//   onto the device for the update (4n bytes fewer over the bus: the new values in and
//   out). (f32 over a file reads the shard in, as the master weights; the update writes it
//   back from the device.) The values are the same bits: the same update on the same master
//   weights writes them.
// - With offload_optimizer.ratio below 1 only the last sub-groups' state is in this store,
//   the others' stays on the device (Note [Partial offload] in zero/partial_offload_store.h).
// - On a CPU training device, device "cpu" keeps the state where it is (DeviceShardStore):
//   host memory is the device's. OffloadConfig::host_store_on_cpu (tests) runs this store
//   there anyway, its copies plain copies, so that its logic is checked without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "zero/host_copies.h"
#include "zero/shard_store.h"

namespace triad::zero {

class HostShardStore : public ShardStore {
 public:
  // device: the training device; dtype: the parameters' (what release copies back);
  // pinned: offload_optimizer.pin_memory.
  HostShardStore(Device device, DType dtype, bool pinned);
  // Waits for the copies in flight.
  ~HostShardStore() override;

  size_t add(Tensor master, int64_t elements) override;
  const ShardState& acquire(size_t entry) override;
  void release(size_t entry, bool dirty) override;
  void prefetch(size_t) override {}
  Tensor read_part(size_t entry, ShardPart part) override;
  void write_part(size_t entry, ShardPart part, const Tensor& values) override;
  bool updates_on_host(size_t) const override { return true; }
  void stage(size_t entry, const Tensor& grad, const Tensor& params) override;
  void finish_update() override;
  void keep_params_in(size_t entry, const Tensor& host) override;
  // On a CPU training device the host memory is the device's: device_bytes counts it all.
  int64_t device_bytes() const override { return device_.is_cpu() ? bytes() : 0; }
  int64_t host_bytes() const override { return device_.is_cpu() ? 0 : bytes(); }

 private:
  struct Entry {
    ShardState state;
    Tensor target;                        // the parameters on the device the update writes (stage to release)
    bool staged = false;                  // between stage and release
    bool in_place = false;                // keep_params_in: the update writes the caller's host buffer
    HostCopies::Copy grad_in, params_in;  // staged: the gradient (and f32 parameters) on their way in
    HostCopies::Copy out;                 // released: the new parameters on their way out
  };
  int64_t bytes() const;
  void finish_out();  // waits for every copy out

  Device device_;
  DType dtype_;
  HostCopies copies_;
  std::vector<Entry> entries_;
  int64_t held_ = -1;
};

}  // namespace triad::zero
