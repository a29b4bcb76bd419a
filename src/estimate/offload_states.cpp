#include "estimate/offload_states.h"

#include <algorithm>
#include <cmath>

#include "tensor/error.h"

namespace triad::estimate {

const char* target_name(OffloadTarget target) {
  return target == OffloadTarget::none ? "none" : target == OffloadTarget::cpu ? "cpu" : "nvme";
}

PlacedStateBytes placed_state_bytes(int stage, OffloadChoice choice, const ModelStateInput& in,
                                    const OffloadBuffers& buffers) {
  const ModelStateBytes b = model_state_bytes(stage, in);
  TRIAD_CHECK(choice.optimizer == OffloadTarget::none || stage >= 1,
              "[estimate] offloading the optimizer's state runs at stages 1-3, not stage 0");
  TRIAD_CHECK(choice.params == OffloadTarget::none || stage == 3,
              "[estimate] offloading parameters runs at stage 3, not stage " << stage);
  TRIAD_CHECK(buffers.optimizer_elements > 0 && buffers.param_elements > 0,
              "[estimate] offload buffers must hold a positive number of elements");
  TRIAD_CHECK(choice.ratio >= 0.0 && choice.ratio <= 1.0,
              "[estimate] the offload ratio must be a number in [0, 1], got " << choice.ratio);
  TRIAD_CHECK(choice.ratio == 1.0 || choice.optimizer == OffloadTarget::cpu,
              "[estimate] an offload ratio below 1 (partial offload) runs with the optimizer on cpu, not "
                  << target_name(choice.optimizer));
  const double shard = in.num_params / double(in.dp), k = in.optimizer_bytes;
  PlacedStateBytes p{.stage = stage, .choice = choice};
  p.device = b.gradients;
  switch (choice.optimizer) {
    case OffloadTarget::none: p.device += b.optimizer; break;
    case OffloadTarget::cpu:  // and the host store's f32 gradient and 16-bit parameter buffers
      p.host += choice.ratio * (b.optimizer + (4 + kParamBytes) * shard);
      p.device += (1.0 - choice.ratio) * b.optimizer;  // (Note [Partial offload])
      break;
    case OffloadTarget::nvme:
      p.nvme += b.optimizer;
      p.host += k * std::min(shard, buffers.optimizer_elements);
      if (stage >= 2) {  // the gradients' shard goes to the swap file too, in f32 (Note [Offloaded gradients])
        p.device -= kGradBytes * shard;
        p.nvme += 4 * shard;
        p.host += 4 * std::min(shard, buffers.optimizer_elements);
      }
      break;
  }
  const double persistent = stage == 3 ? kParamBytes * in.persistent_params : 0.0;
  switch (choice.params) {
    case OffloadTarget::none: p.device += b.parameters; break;
    case OffloadTarget::cpu:
      p.host += kParamBytes * shard;
      p.device += persistent;
      break;
    case OffloadTarget::nvme:
      p.nvme += kParamBytes * shard;
      p.host += kParamBytes * std::min(shard, buffers.param_elements);
      p.device += persistent;
      break;
  }
  return p;
}

std::vector<PlacedStateBytes> placed_state_bytes_all(const ModelStateInput& in, const OffloadBuffers& buffers,
                                                     double ratio) {
  using T = OffloadTarget;
  std::vector<PlacedStateBytes> out;
  const auto add = [&](int stage, OffloadChoice choice) {
    out.push_back(placed_state_bytes(stage, choice, in, buffers));
    if (choice.optimizer == T::cpu && ratio != 1.0)
      out.push_back(
          placed_state_bytes(stage, {.optimizer = T::cpu, .params = choice.params, .ratio = ratio}, in, buffers));
  };
  for (int stage = 0; stage <= 3; ++stage) {
    add(stage, {});
    if (stage == 0) continue;
    add(stage, {.optimizer = T::cpu});
    add(stage, {.optimizer = T::nvme});
    if (stage < 3) continue;
    add(stage, {.optimizer = T::cpu, .params = T::cpu});
    add(stage, {.optimizer = T::nvme, .params = T::nvme});
  }
  return out;
}

}  // namespace triad::estimate
