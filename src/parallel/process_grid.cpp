#include "parallel/process_grid.h"

#include <algorithm>
#include <sstream>

#include "parallel/runtime.h"

namespace triad::parallel {

ProcessGrid::ProcessGrid(CommunicatorPtr world, const GridLayout& layout)
    : world_(std::move(world)), tp_(layout.tp), dp_(layout.dp), pp_(layout.pp), ep_(layout.ep), hpz_(layout.hpz) {
  TRIAD_CHECK(world_ != nullptr, "ProcessGrid: the world communicator is null");
  const int n = world_->size(), tp = tp_, dp = dp_, pp = pp_, ranks_per_node = layout.ranks_per_node;
  TRIAD_CHECK(tp >= 1 && dp >= 1 && pp >= 1 && int64_t(tp) * dp * pp == n,
              "ProcessGrid: tp (" << tp << ") * dp (" << dp << ") * pp (" << pp << ") = " << int64_t(tp) * dp * pp
                                  << " must equal the world size " << n << ", each degree >= 1");
  TRIAD_CHECK(ep_ >= 1 && dp % ep_ == 0, "ProcessGrid: ep (" << ep_ << ") must divide dp (" << dp << "): an "
                                             << "expert-parallel group is ep consecutive data-parallel ranks");
  TRIAD_CHECK(hpz_ >= 1 && dp % hpz_ == 0, "ProcessGrid: hpz (" << hpz_ << ") must divide dp (" << dp << "): an hpZ "
                                               << "partition is hpz consecutive data-parallel ranks");
  TRIAD_CHECK(ranks_per_node >= 0 && (ranks_per_node == 0 || n % ranks_per_node == 0),
              "ProcessGrid: ranks_per_node " << ranks_per_node << " must divide the world size " << n
                                             << " (or be 0: detect nodes)");
  const int r = world_->rank();
  tp_r_ = r % tp;
  dp_r_ = (r / tp) % dp;
  pp_r_ = r / (tp * dp);

  // Node of every grid rank: emulated, or MPI's shared-memory node ids gathered.
  node_of_.assign(n, 0);
  if (ranks_per_node > 0) {
    for (int q = 0; q < n; ++q) node_of_[q] = q / ranks_per_node;
  } else {
    Tensor mine = Tensor::full({1}, node_id(), DType::i32);
    Tensor all = Tensor::empty({n}, DType::i32);
    world_->all_gather(mine, all)->wait();
    const int32_t* ids = all.data<int32_t>();
    std::vector<int32_t> seen;  // node ids in order of first appearance
    for (int q = 0; q < n; ++q) {
      auto it = std::find(seen.begin(), seen.end(), ids[q]);
      node_of_[q] = int(it - seen.begin());
      if (it == seen.end()) seen.push_back(ids[q]);
    }
  }
  node_index_ = node_of_[r];
  num_nodes_ = *std::max_element(node_of_.begin(), node_of_.end()) + 1;
  ranks_per_node_ = int(std::count(node_of_.begin(), node_of_.end(), node_index_));
  local_rank_ = int(std::count(node_of_.begin(), node_of_.begin() + r, node_index_));

  // Group communicators (Note [Rank layout]); every rank makes the same splits in order.
  const int tp_color = dp_r_ + dp * pp_r_;
  const int dp_color = tp_r_ + tp * pp_r_;
  const int pp_color = tp_r_ + tp * dp_r_;
  tp_comm_ = world_->split(tp_color, tp_r_);
  dp_comm_ = world_->split(dp_color, dp_r_);
  pp_comm_ = world_->split(pp_color, pp_r_);

  // Position inside the dp group's part on this node: members with a smaller dp rank there.
  int intra_pos = 0;
  for (int d = 0; d < dp_r_; ++d)
    if (node_of_[rank_of(tp_r_, d, pp_r_)] == node_index_) ++intra_pos;
  intra_comm_ = world_->split(dp_color * num_nodes_ + node_index_, dp_r_);
  inter_comm_ = world_->split(dp_color * dp + intra_pos, dp_r_);

  // Groups of consecutive dp ranks (ep, hpz) and the strided one across the ep groups (edp).
  ep_comm_ = world_->split(dp_color * (dp / ep_) + edp_rank(), dp_r_);
  edp_comm_ = world_->split(dp_color * ep_ + ep_rank(), dp_r_);
  hpz_comm_ = world_->split(dp_color * (dp / hpz_) + dp_r_ / hpz_, dp_r_);
  for (const auto& [group, axis] : {std::pair{&tp_comm_, "tp"}, {&dp_comm_, "dp"}, {&pp_comm_, "pp"},
                                    {&intra_comm_, "intra-node"}, {&inter_comm_, "inter-node"}, {&ep_comm_, "ep"},
                                    {&edp_comm_, "expert-dp"}, {&hpz_comm_, "hpz"}})
    (*group)->set_axis(axis);
}

CommunicatorPtr ProcessGrid::tied_group(const std::vector<int>& stages) const {
  for (size_t i = 0; i < stages.size(); ++i)
    TRIAD_CHECK(stages[i] >= 0 && stages[i] < pp_ && (i == 0 || stages[i - 1] < stages[i]),
                "ProcessGrid::tied_group: the stages must be increasing pipeline stages in [0, " << pp_ << "), got "
                                                                                                 << stages[i]
                                                                                                 << " at position " << i);
  const bool mine = std::binary_search(stages.begin(), stages.end(), pp_r_);
  CommunicatorPtr group = pp_comm_->split(mine ? 0 : 1, pp_r_);
  group->set_axis("tied");
  return mine ? group : nullptr;
}

std::vector<int> ProcessGrid::dp_nodes() const {
  std::vector<int> nodes(static_cast<size_t>(dp_));
  for (int d = 0; d < dp_; ++d) nodes[size_t(d)] = node_of_[size_t(rank_of(tp_r_, d, pp_r_))];
  return nodes;
}

std::string ProcessGrid::str() const {
  std::ostringstream os;
  os << "grid tp=" << tp_ << " dp=" << dp_ << " pp=" << pp_;
  if (ep_ > 1) os << " ep=" << ep_;
  if (hpz_ > 1) os << " hpz=" << hpz_;
  os << " rank " << rank() << " (tp " << tp_r_ << ", dp " << dp_r_ << ", pp " << pp_r_ << ") node " << node_index_
     << "/" << num_nodes_ << " local " << local_rank_;
  return os.str();
}

}  // namespace triad::parallel
