// Where ZeRO's model states sit per data-parallel rank when the optimizer's state and (stage
// 3) the parameters are offloaded: bytes on the training device, in host memory and on NVMe,
// for each stage and offload choice, as DeepSpeed's estimate_zero3_model_states_mem_needs
// splits GPU and CPU memory. Pure arithmetic over estimate/model_states.h's figures.
//
// With S = Ψ/n the elements of a rank's shard (stages 1-3; stage 0 keeps no shard and takes
// no offload), K the optimizer's bytes per parameter, P the persistent elements of stage 3:
//   optimizer  none: device KS        cpu: host (K+6)S    nvme: NVMe KS, host K·min(S, B_o)
//   parameters none: device 2S + 2P   cpu: host 2S,       nvme: NVMe 2S, host 2·min(S, B_p),
//                                          device 2P            device 2P
//   gradients  device, as model_states.h (2Ψ at stage 1, 2Ψ/n + 2P at stage 3 ...); with
//              the optimizer on nvme at stages 2-3 the shard's 2S leave the device for
//              NVMe 4S (f32), host 4·min(S, B_o) (zero/nvme_shard_store.h, Note
//              [Offloaded gradients])
// cpu's 6S: the host store's copy buffers, the shard's f32 gradient and its new 16-bit
// parameters (zero/host_shard_store.h, Note [Host optimizer step]). With offload_optimizer
// ratio r below 1 (cpu only; zero/partial_offload_store.h, Note [Partial offload]) the
// shard splits: device K(1 − r)S, host (K+6)rS (the split is by sub-groups, so r S is what
// the host holds within one sub-group).
// B_o = buffer_count × sub_group_size (offload_optimizer's buffers, each one sub-group's
// master weights and moments), B_p = buffer_count × buffer_size (offload_param's, each one
// shard). Parameter offload is stage 3's only. Not counted: the units gathered on the device
// during a forward or backward (DeepSpeed's largest layer), buckets and activations.
#pragma once

#include <vector>

#include "estimate/model_states.h"

namespace triad::estimate {

enum class OffloadTarget { none, cpu, nvme };
const char* target_name(OffloadTarget target);  // "none", "cpu", "nvme"

struct OffloadChoice {
  OffloadTarget optimizer = OffloadTarget::none;
  OffloadTarget params = OffloadTarget::none;  // stage 3 only
  double ratio = 1.0;                          // the optimizer's share offloaded, in [0, 1]; below 1 with cpu only
};

// Elements the swap buffers hold, DeepSpeed's defaults: 4 × 1e9 and 5 × 1e8.
struct OffloadBuffers {
  double optimizer_elements = 4e9;
  double param_elements = 5e8;
};

struct PlacedStateBytes {
  int stage = 0;
  OffloadChoice choice;
  double device = 0, host = 0, nvme = 0;
};

// One stage and choice. Error naming what does not fit: offload at stage 0, parameter
// offload below stage 3, buffers that are not positive, a ratio outside [0, 1] or below 1
// without the optimizer on cpu.
PlacedStateBytes placed_state_bytes(int stage, OffloadChoice choice, const ModelStateInput& input,
                                    const OffloadBuffers& buffers = {});
// Every valid pair, stage by stage: no offload; the optimizer to cpu, to nvme (stages 1-3);
// at stage 3 the optimizer and the parameters both to cpu, both to nvme. With `ratio` below
// 1, each choice with the optimizer on cpu is followed by the same with that ratio.
std::vector<PlacedStateBytes> placed_state_bytes_all(const ModelStateInput& input, const OffloadBuffers& buffers = {},
                                                     double ratio = 1.0);

}  // namespace triad::estimate
