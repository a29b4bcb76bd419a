#include "zero/expert_placement.h"

#include "tensor/error.h"

namespace triad::zero {

void check_expert_placement(const ExpertPlacement& experts, int dp) {
  if (!experts.spread()) return;
  const int edp = experts.edp->size();
  TRIAD_CHECK(edp >= 1 && dp % edp == 0, "ZeRO: the expert-data-parallel group has " << edp << " ranks, which must "
                                                                                     << "divide the " << dp
                                                                                     << " data-parallel ranks");
}

}  // namespace triad::zero
