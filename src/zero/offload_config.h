// Where ZeRO keeps the optimizer's state and (stage 3) the parameters' shards: DeepSpeed's
// zero_optimization.offload_optimizer and offload_param sections, with its defaults. The file store it selects is zero/nvme_shard_store.h; the
// transfers' knobs are the top-level `aio` section (io::AioConfig, io/swap_file.h).
#pragma once

#include <cstdint>
#include <string>

namespace triad::zero {

// none: memory on the training device (zero/shard_store.h's DeviceShardStore). cpu: host
// memory, where the update runs too (zero/host_shard_store.h; with ratio below 1 only part
// of it, zero/partial_offload_store.h); on a CPU training device that is the device's
// memory: the same store as none. nvme: files under nvme_path.
enum class OffloadDevice { none, cpu, nvme };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;  // a folder; each rank keeps its state files in it (device nvme)
  // cpu on a GPU: the host state in pinned memory, its copies queued (Note [Host optimizer
  // step]); nvme: accepted, the swap buffers are page-aligned host memory.
  bool pin_memory = false;
  // Sub-groups (of sub_group_size elements) whose state is in memory at once (nvme): the
  // one the update works on, the next being read, the previous ones being written.
  int64_t buffer_count = 4;
  bool fast_init = false;     // accepted; each sub-group's initial state is written once either way
  // cpu: the share of the state offloaded, in [0, 1], by sub-groups (Note [Partial offload]
  // in zero/partial_offload_store.h); nvme: 1 only.
  double ratio = 1.0;
  bool pipeline_read = false;   // read the next sub-group while the update works on this one
  bool pipeline_write = false;  // write a sub-group back while the update goes on (and into the next step)
  // Internal, no config key (tests): device cpu on a CPU training device runs the host store
  // anyway, with state, gradients and parameters copied between its memory and the device's
  // as on a GPU, so that its path is checked where no GPU is.
  bool host_store_on_cpu = false;
};

// Where stage 3 keeps each rank's shard of the (16-bit or working) parameters between uses
// (Note [Offloaded parameters] in zero/param_swap.h). none, or cpu on a CPU training device:
// the device's memory; cpu on a GPU: host memory, each partitioned flat group's shard copied
// to the device just before its gather and back after the optimizer step; nvme: a file under
// nvme_path, read and written likewise.
struct ParamOffloadConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;
  // cpu on a GPU: the host shards in pinned memory, their copies queued; nvme: accepted,
  // the swap buffers are page-aligned host memory.
  bool pin_memory = false;
  // Flat groups' shards on the device at once; with nvme each of at most buffer_size elements.
  int64_t buffer_count = 5;
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;  // accepted: DeepSpeed's bound for nvme; triad's cpu keeps every shard on the host
  // Internal, no config key (tests): device cpu on a CPU training device runs the host
  // backend anyway, each shard copied between its host buffer and a separate device shard
  // as on a GPU, so that its path is checked where no GPU is.
  bool host_store_on_cpu = false;
};

}  // namespace triad::zero
