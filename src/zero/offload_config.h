// Where ZeRO keeps the optimizer's state: DeepSpeed's zero_optimization.offload_optimizer
// section, with its defaults. The file store it selects is zero/nvme_shard_store.h; the
// transfers' knobs are the top-level `aio` section (io::AioConfig, io/swap_file.h).
#pragma once

#include <cstdint>
#include <string>

namespace triad::zero {

// none: memory on the training device (zero/shard_store.h's DeviceShardStore). cpu: host
// memory, which on a CPU training device is the same store. nvme: files under nvme_path.
enum class OffloadDevice { none, cpu, nvme };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::none;
  std::string nvme_path;  // a folder; each rank keeps its state files in it (device nvme)
  bool pin_memory = false;    // accepted; the swap buffers are page-aligned host memory
  // Sub-groups (of sub_group_size elements) whose state is in memory at once (nvme): the
  // one the update works on, the next being read, the previous ones being written.
  int64_t buffer_count = 4;
  bool fast_init = false;     // accepted; each sub-group's initial state is written once either way
  double ratio = 1.0;         // the share of the state offloaded: 1.0 only (partial offload is not built)
  bool pipeline_read = false;   // read the next sub-group while the update works on this one
  bool pipeline_write = false;  // write a sub-group back while the update goes on (and into the next step)
};

}  // namespace triad::zero
