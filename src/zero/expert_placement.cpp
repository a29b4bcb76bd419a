#include "zero/expert_placement.h"

#include "tensor/error.h"

namespace triad::zero {

void check_expert_placement(const ExpertPlacement& experts, const ZeroConfig& config, int dp) {
  if (!experts.spread()) return;
  const int edp = experts.edp->size();
  TRIAD_CHECK(edp >= 1 && dp % edp == 0, "ZeRO: the expert-data-parallel group has " << edp << " ranks, which must "
                                                                                     << "divide the " << dp
                                                                                     << " data-parallel ranks");
  check_experts_spread(config);
}

void check_experts_spread(const ZeroConfig& config) {
  TRIAD_CHECK(config.hpz_partition_size == 1, "[config] zero_optimization.zero_hpz_partition_size "
                                                  << config.hpz_partition_size
                                                  << " cannot be combined with model.moe.expert_parallel_size > 1 "
                                                     "(hpZ partitions dp, the experts live on edp)");
  TRIAD_CHECK(!config.quantized_gradients,
              "[config] zero_optimization.zero_quantized_gradients cannot be combined "
              "with model.moe.expert_parallel_size > 1 (qgZ reduces over dp's nodes)");
}

}  // namespace triad::zero
