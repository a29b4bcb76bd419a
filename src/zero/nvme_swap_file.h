// The swap file an NVMe offload keeps in its configured folder (the optimizer's shard,
// nvme_shard_store.h; the parameters, param_swap.h; state kept beside them, such as an RLHF
// actor's weight average): one per store and rank, named for both.
#pragma once

#include <memory>
#include <string>

#include "io/swap_file.h"
#include "tensor/tensor.h"

namespace triad::zero {

// Opens a new swap file "triad-<kind>-rank<R>-<N>.swp" in `folder`, the value of the
// config key `key` (e.g. "zero_optimization.offload_param.nvme_path"). Throws Error naming
// the key and the folder when the folder is missing, not a folder, or the file cannot be
// made.
std::unique_ptr<io::SwapFile> open_nvme_swap_file(const std::string& key, const std::string& folder,
                                                  const std::string& kind, const io::AioConfig& aio);

// A host f32 tensor over `bytes` (a multiple of 4) of memory aligned for direct I/O.
Tensor aligned_host(int64_t bytes);

}  // namespace triad::zero
