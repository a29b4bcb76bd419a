#include "parallel/process_grid.h"

#include <algorithm>
#include <sstream>

#include "parallel/runtime.h"

namespace triad::parallel {

ProcessGrid::ProcessGrid(CommunicatorPtr world, int tp, int dp, int pp, int ranks_per_node)
    : world_(std::move(world)), tp_(tp), dp_(dp), pp_(pp) {
  TRIAD_CHECK(world_ != nullptr, "ProcessGrid: the world communicator is null");
  const int n = world_->size();
  TRIAD_CHECK(tp >= 1 && dp >= 1 && pp >= 1 && int64_t(tp) * dp * pp == n,
              "ProcessGrid: tp (" << tp << ") * dp (" << dp << ") * pp (" << pp << ") = " << int64_t(tp) * dp * pp
                                  << " must equal the world size " << n << ", each degree >= 1");
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
}

std::string ProcessGrid::str() const {
  std::ostringstream os;
  os << "grid tp=" << tp_ << " dp=" << dp_ << " pp=" << pp_ << " rank " << rank() << " (tp " << tp_r_ << ", dp "
     << dp_r_ << ", pp " << pp_r_ << ") node " << node_index_ << "/" << num_nodes_ << " local " << local_rank_;
  return os.str();
}

}  // namespace triad::parallel
