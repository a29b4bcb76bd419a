// ProcessGrid: the tp × dp × pp layout of a job's ranks and the communicators of all its
// groups: the three axes, the node topology that hierarchical collectives need (ZeRO++'s
// qgZ node groups and hpZ partitions), the expert-parallel groups inside dp, and the
// groups of pipeline stages that share a tied module. It is the one place that splits a
// job's communicator into layout groups (Megatron's parallel_state, DeepSpeed's groups).
//
// Note [Rank layout]: Megatron's order, tp fastest, then dp, then pp:
//   rank = tp_r + tp·(dp_r + dp·pp_r)
// so a tp group is tp consecutive ranks (inside a node when tp ≤ ranks per node) and pp
// is outermost. Group communicators order their members by the coordinate along the group
// (tp() by tp_r, dp() by dp_r, pp() by pp_r), so tp().rank() == tp_rank() and so on.
//
// Groups inside a dp group, each ordered by dp_r:
//   ep()  expert-parallel (DeepSpeed's _create_expert_and_data_parallel): ep consecutive
//         dp ranks, dp_r / ep apart from the others; a rank's ep_rank() is dp_r % ep.
//         The experts of a MoE layer are spread over it (ep must divide dp).
//   edp() expert-data-parallel: the dp/ep ranks of the dp group with this rank's ep_rank()
//         (dp_r % ep), which hold the same experts and reduce their gradients; edp_rank()
//         is dp_r / ep. At ep = 1, ep() is this rank alone and edp() is dp().
//   hpz() ZeRO++ hpZ's secondary partition: hpz consecutive dp ranks (hpz must divide dp).
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
// Construction is collective over `world` (one all-gather of node ids when detecting, eight
// splits); arguments are checked before any communication, so ranks given the same
// arguments all throw the same Error instead of hanging.
#pragma once

#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace triad::parallel {

// The sizes of a grid's axes and where its ranks sit, given by name:
//   ProcessGrid grid(world, {.tp = 2, .dp = 4, .ranks_per_node = 4});
struct GridLayout {
  int tp = 1, dp = 1, pp = 1;  // tp·dp·pp must equal the world size
  int ep = 1;                  // expert-parallel group size; must divide dp
  int hpz = 1;                 // ZeRO++ hpZ partition size; must divide dp
  // 0 detects nodes from MPI; > 0 emulates nodes of that many consecutive ranks and must
  // divide the world size.
  int ranks_per_node = 0;
};

class ProcessGrid {
 public:
  // world: the communicator the grid covers (usually parallel::init's; may be a
  // CountingCommunicator, whose counters the groups then share).
  ProcessGrid(CommunicatorPtr world, const GridLayout& layout);

  int tp_size() const { return tp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }
  int ep_size() const { return ep_; }
  int edp_size() const { return dp_ / ep_; }
  int hpz_size() const { return hpz_; }
  int tp_rank() const { return tp_r_; }
  int dp_rank() const { return dp_r_; }
  int pp_rank() const { return pp_r_; }
  int ep_rank() const { return dp_r_ % ep_; }
  int edp_rank() const { return dp_r_ / ep_; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  // Note [Rank layout], for any coordinates.
  int rank_of(int tp_r, int dp_r, int pp_r) const { return tp_r + tp_ * (dp_r + dp_ * pp_r); }

  const CommunicatorPtr& world() const { return world_; }
  const CommunicatorPtr& tp() const { return tp_comm_; }
  const CommunicatorPtr& dp() const { return dp_comm_; }
  const CommunicatorPtr& pp() const { return pp_comm_; }
  const CommunicatorPtr& ep() const { return ep_comm_; }
  const CommunicatorPtr& edp() const { return edp_comm_; }
  const CommunicatorPtr& hpz() const { return hpz_comm_; }
  const CommunicatorPtr& intra_node() const { return intra_comm_; }  // of the dp group
  const CommunicatorPtr& inter_node() const { return inter_comm_; }  // of the dp group

  // The group of the ranks of this rank's pp group at the pipeline stages `stages`
  // (increasing pp coordinates), ordered by stage, for a module tied across them (Megatron's
  // embedding group is the stages {0, pp_size() - 1}); null on a rank whose stage is not
  // among them. Collective over pp(): its ranks call it in the same order with the same
  // stages. Throws Error for a stage out of range or out of order.
  CommunicatorPtr tied_group(const std::vector<int>& stages) const;

  int ranks_per_node() const { return ranks_per_node_; }  // ranks on this rank's node
  int num_nodes() const { return num_nodes_; }
  int node_index() const { return node_index_; }
  int local_rank() const { return local_rank_; }
  // The node index of every grid rank.
  const std::vector<int>& node_of_rank() const { return node_of_; }
  // The node index of every rank of dp(), by dp rank.
  std::vector<int> dp_nodes() const;

  // "grid tp=2 dp=2 pp=2 rank 5 (tp 1, dp 0, pp 1) node 1/2 local 1"; with ep > 1 or
  // hpz > 1 their sizes follow pp's.
  std::string str() const;

 private:
  CommunicatorPtr world_, tp_comm_, dp_comm_, pp_comm_, ep_comm_, edp_comm_, hpz_comm_, intra_comm_, inter_comm_;
  int tp_, dp_, pp_, ep_, hpz_;
  int tp_r_ = 0, dp_r_ = 0, pp_r_ = 0;
  int ranks_per_node_ = 1, num_nodes_ = 1, node_index_ = 0, local_rank_ = 0;
  std::vector<int> node_of_;
};

}  // namespace triad::parallel
