#include "zero/frozen_partition.h"

#include "autograd/grad_mode.h"

namespace triad::zero {

FrozenPartition::FrozenPartition(const nn::ModulePtr& model, const ZeroConfig& config, parallel::CommunicatorPtr dp,
                                 const WrapPolicy& policy)
    : config_(config), dp_(std::move(dp)), units_(make_units(model, policy)) {
  TRIAD_CHECK(dp_ != nullptr, "ZeRO: a frozen partition needs a data-parallel communicator");
  for (size_t u = 0; u < units_.size(); ++u) {
    using Params = std::vector<std::pair<std::string, Tensor>>;
    Params lists[2];  // [persistent]
    for (const auto& np : units_[u].params)
      lists[np.second.numel() <= config_.stage3_param_persistence_threshold].push_back(np);
    groups_.emplace_back();
    for (int persistent : {0, 1}) {
      if (lists[persistent].empty()) continue;
      Group g;
      g.flat = std::make_unique<FlatGroup>(std::move(lists[persistent]), 0.0, dp_->size(), dp_->rank());
      g.flat->take_initial_f32();  // the values are the flat buffer itself (f32)
      g.partitioned = !persistent;
      if (g.partitioned) g.flat->partition();
      groups_.back().push_back(std::move(g));
    }
    nn::Module& m = *units_[u].module;
    m.register_forward_pre_hook([this, u](nn::Module&) {
      TRIAD_CHECK(!GradMode::enabled(),
                  "a frozen model's parameters are gathered for forwards without gradients "
                  "(NoGradGuard); it has none to train");
      gather_unit(u);
      int64_t budget = config_.stage3_prefetch_bucket_size;
      for (size_t next = u + 1; next < units_.size(); ++next) {
        int64_t elements = 0;
        for (const Group& g : groups_[next]) elements += g.partitioned ? g.flat->padded() : 0;
        if (next > u + 1 && elements > budget) break;
        prefetch_unit(next);
        budget -= elements;
      }
    });
    m.register_forward_hook([this, u](nn::Module&) { release_unit(u); });
  }
}

void FrozenPartition::prefetch_unit(size_t u) {
  for (Group& g : groups_[u]) {
    if (!g.partitioned || g.gather || g.flat->flat().defined()) continue;
    g.gather = config_.quantized_weights ? g.flat->start_quantized_gather(*dp_, config_.weight_quantization_block)
                                         : g.flat->start_gather(*dp_);
  }
}

void FrozenPartition::gather_unit(size_t u) {
  prefetch_unit(u);
  for (Group& g : groups_[u]) {
    if (!g.gather) continue;
    g.gather->wait();
    g.gather.reset();
    g.flat->finish_gather();
  }
}

void FrozenPartition::release_unit(size_t u) {
  for (Group& g : groups_[u]) {
    if (!g.partitioned) continue;
    if (g.gather) {  // a prefetch nobody used: let it land before freeing its buffer
      g.gather->wait();
      g.gather.reset();
    }
    if (g.flat->flat().defined()) g.flat->release();
  }
}

int64_t FrozenPartition::resident_bytes() const {
  int64_t bytes = 0;
  for (const std::vector<Group>& unit : groups_)
    for (const Group& g : unit)
      bytes += (g.partitioned ? g.flat->shard_size() : g.flat->padded()) * int64_t(element_size(g.flat->dtype()));
  return bytes;
}

std::vector<std::pair<int64_t, bool>> FrozenPartition::group_sizes() const {
  std::vector<std::pair<int64_t, bool>> out;
  for (const std::vector<Group>& unit : groups_)
    for (const Group& g : unit) out.emplace_back(g.flat->padded(), g.partitioned);
  return out;
}

}  // namespace triad::zero
