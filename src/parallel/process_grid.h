// ProcessGrid: the tp × dp × pp layout of a job's ranks and the communicators of its
// groups, plus the node topology that hierarchical collectives (ZeRO++ hpZ/qgZ) need.
//
// Note [Rank layout]: Megatron's order, tp fastest, then dp, then pp:
//   rank = tp_r + tp·(dp_r + dp·pp_r)
// so a tp group is tp consecutive ranks (inside a node when tp ≤ ranks per node) and pp
// is outermost. Group communicators order their members by the coordinate along the group
// (tp() by tp_r, dp() by dp_r, pp() by pp_r), so tp().rank() == tp_rank() and so on.
//
// Node topology. A node is a set of ranks sharing memory (MPI_COMM_TYPE_SHARED, found
// by parallel::init), or, with ranks_per_node > 0, the emulated node rank / ranks_per_node
// (to test multi-node code on one machine). Nodes are numbered in order of their lowest
// grid rank; local_rank() is the position among the node's ranks in grid-rank order.
// intra_node() holds the ranks of this rank's dp group on its node; inter_node() holds the
// ranks of its dp group with the same position in their intra_node() group, one per node.
// Both are ordered by dp_r. They are uniform (every intra_node() of one size, every
// inter_node() of one size) when every node holds equally many ranks of each dp group:
// when ranks_per_node divides tp (intra_node() of size 1), or tp divides ranks_per_node
// and ranks_per_node divides tp·dp. Other layouts give groups of different sizes.
//
// Construction is collective over `world` (one all-gather of node ids when detecting, five
// splits); arguments are checked before any communication, so ranks given the same
// arguments all throw the same Error instead of hanging.
#pragma once

#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace triad::parallel {

class ProcessGrid {
 public:
  // world: the communicator the grid covers (usually parallel::init's; may be a
  // CountingCommunicator, whose counters the groups then share). tp·dp·pp must equal
  // world->size(). ranks_per_node: 0 detects nodes from MPI; > 0 emulates nodes of that
  // many consecutive ranks and must divide world->size().
  ProcessGrid(CommunicatorPtr world, int tp, int dp, int pp, int ranks_per_node = 0);

  int tp_size() const { return tp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }
  int tp_rank() const { return tp_r_; }
  int dp_rank() const { return dp_r_; }
  int pp_rank() const { return pp_r_; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  // Note [Rank layout], for any coordinates.
  int rank_of(int tp_r, int dp_r, int pp_r) const { return tp_r + tp_ * (dp_r + dp_ * pp_r); }

  const CommunicatorPtr& world() const { return world_; }
  const CommunicatorPtr& tp() const { return tp_comm_; }
  const CommunicatorPtr& dp() const { return dp_comm_; }
  const CommunicatorPtr& pp() const { return pp_comm_; }
  const CommunicatorPtr& intra_node() const { return intra_comm_; }  // of the dp group
  const CommunicatorPtr& inter_node() const { return inter_comm_; }  // of the dp group

  int ranks_per_node() const { return ranks_per_node_; }  // ranks on this rank's node
  int num_nodes() const { return num_nodes_; }
  int node_index() const { return node_index_; }
  int local_rank() const { return local_rank_; }
  // The node index of every grid rank.
  const std::vector<int>& node_of_rank() const { return node_of_; }

  // "grid tp=2 dp=2 pp=2 rank 5 (tp 1, dp 0, pp 1) node 1/2 local 1"
  std::string str() const;

 private:
  CommunicatorPtr world_, tp_comm_, dp_comm_, pp_comm_, intra_comm_, inter_comm_;
  int tp_, dp_, pp_;
  int tp_r_ = 0, dp_r_ = 0, pp_r_ = 0;
  int ranks_per_node_ = 1, num_nodes_ = 1, node_index_ = 0, local_rank_ = 0;
  std::vector<int> node_of_;
};

}  // namespace triad::parallel
