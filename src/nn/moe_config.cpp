#include "nn/moe_config.h"

#include <cmath>

#include "tensor/error.h"

namespace triad::nn {

void MoEConfig::validate() const {
  TRIAD_CHECK(num_experts >= 1, "[moe] num_experts must be positive, got " << num_experts);
  TRIAD_CHECK(k >= 1 && k <= num_experts, "[moe] k must be in [1, num_experts = " << num_experts << "], got " << k);
  TRIAD_CHECK(std::isfinite(capacity_factor) && capacity_factor > 0,
              "[moe] capacity_factor must be positive, got " << capacity_factor);
  TRIAD_CHECK(std::isfinite(eval_capacity_factor) && eval_capacity_factor > 0,
              "[moe] eval_capacity_factor must be positive, got " << eval_capacity_factor);
  TRIAD_CHECK(min_capacity >= 0, "[moe] min_capacity must be >= 0, got " << min_capacity);
  // DeepSpeed ignores RSample for k >= 2 without a word; here the option would do nothing.
  TRIAD_CHECK(noisy_gate_policy != NoisyGatePolicy::rsample || k == 1,
              "[moe] noisy_gate_policy RSample applies to top-1 gating only, got k = " << k);
  TRIAD_CHECK(aux_loss_coeff >= 0 && z_loss_coeff >= 0,
              "[moe] aux_loss_coeff and z_loss_coeff must be >= 0, got " << aux_loss_coeff << " and " << z_loss_coeff);
}

MoEConfig MoEModelConfig::at(int64_t block) const {
  MoEConfig c = layer;
  c.num_experts = 0;
  if (enabled() && (block + 1) % every == 0) {
    const int64_t i = (block + 1) / every - 1;
    c.num_experts = num_experts.size() == 1 ? num_experts[0] : num_experts[size_t(i)];
  }
  return c;
}

void MoEModelConfig::validate(int64_t n_layer) const {
  if (!enabled()) return;
  TRIAD_CHECK(every >= 1 && every <= n_layer,
              "[model.moe] every must be in [1, n_layer = " << n_layer << "], got " << every);
  const int64_t blocks = moe_blocks(n_layer);
  TRIAD_CHECK(num_experts.size() == 1 || int64_t(num_experts.size()) == blocks,
              "[model.moe] num_experts must be one count or a list of one per MoE block ("
                  << blocks << " blocks of " << n_layer << " at every " << every << "), got a list of "
                  << num_experts.size());
  for (int64_t i = 0; i < n_layer; ++i)
    if (const MoEConfig c = at(i); c.num_experts != 0) c.validate();
}

}  // namespace triad::nn
