// ZeRO-3 for a model that is never trained (RLHF's reference and reward models): its
// parameters partitioned over the data-parallel ranks as a trained model's are at stage 3,
// with neither gradients nor optimizer state.
//
// Note [Frozen partition]: the model's parameters form units (zero/units.h, the trained
// models' policy) and each unit's flat groups (zero/flat_group.h: one of the parameters
// above stage3_param_persistence_threshold elements, partitioned; one of the rest, kept
// whole on every rank, as ZeroOptimizer keeps them) are laid out as a trained model's. Each
// rank keeps its shard alone. A forward pre-hook on each unit's module all-gathers the unit's
// parameters (the units ahead started within stage3_prefetch_bucket_size elements, the next
// one always), and its post-hook frees them again: the root unit (the model itself) is held
// for the whole forward, each block for its own. With zero_quantized_weights the gathers move
// int8 blocks of weight_quantization_block elements (ZeRO++ qwZ, Note [ZeRO++] in
// zero/zero_optimizer.h), as a trained model's forward gathers do. Forwards run without
// gradients (no backward re-gathers anything); every rank of the group runs the same
// forwards in the same order, since each gather is a collective.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "parallel/communicator.h"
#include "zero/flat_group.h"
#include "zero/units.h"
#include "zero/zero_config.h"

namespace triad::zero {

class FrozenPartition {
 public:
  // model: f32 parameters on one device. config: its stage3_param_persistence_threshold,
  // stage3_prefetch_bucket_size, quantized_weights and weight_quantization_block are
  // read (the rest concern training). dp: the ranks the parameters are partitioned over.
  // It installs hooks on the model's modules that refer to it: the model must not run a
  // forward after its FrozenPartition is gone.
  FrozenPartition(const nn::ModulePtr& model, const ZeroConfig& config, parallel::CommunicatorPtr dp,
                  const WrapPolicy& policy = {});
  FrozenPartition(const FrozenPartition&) = delete;
  FrozenPartition& operator=(const FrozenPartition&) = delete;

  // Parameter bytes resident on this rank between forwards: the shards of the partitioned
  // groups and the whole persistent ones (padded).
  int64_t resident_bytes() const;
  // The flat groups' padded sizes and whether each is partitioned, in order.
  std::vector<std::pair<int64_t, bool>> group_sizes() const;

 private:
  struct Group {
    std::unique_ptr<FlatGroup> flat;
    bool partitioned = false;
    parallel::WorkPtr gather;  // in flight
  };
  void gather_unit(size_t u);
  void prefetch_unit(size_t u);
  void release_unit(size_t u);

  ZeroConfig config_;
  parallel::CommunicatorPtr dp_;
  std::vector<Unit> units_;
  std::vector<std::vector<Group>> groups_;  // per unit
};

}  // namespace triad::zero
