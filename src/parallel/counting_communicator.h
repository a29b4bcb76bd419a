// CountingCommunicator: wraps any Communicator and records, per collective kind, the calls,
// payload bytes and bus bytes that pass through it, with nccl-tests' definitions
// (REFERENCE.md, "Collective benchmarks"), n = size() of the communicator the call is on:
//
//   kind            payload S                      bus bytes
//   all_reduce      the buffer                     S * 2(n-1)/n
//   reduce_scatter  the total input (n * output)   S * (n-1)/n
//   all_gather      the total output (n * input)   S * (n-1)/n
//   all_to_all      the send buffer                S * (n-1)/n
//     (all_to_allv, counted as all_to_all: the send buffer; the bytes sent to other ranks)
//   broadcast       the buffer                     S
//   send, recv      the buffer                     S
//
// Bus bytes are what one rank moves with a bandwidth-optimal algorithm, so they compare
// across collectives and communicator sizes. Counts are per rank (each rank counts its own
// calls); p2p is counted where it happens: a send on the sender, a recv on the receiver
// (send_recv counts as one of each).
// barrier() is forwarded and not counted. A call is counted once the wrapped communicator
// has accepted it (a call that throws is not counted).
//
// Nodes: given the node of each of its ranks, a communicator also splits bus bytes into
// intra- and inter-node. A collective over ranks of several nodes runs at the speed of the
// links between them (every link of a ring carries the whole bus volume; ZeRO++'s paper
// counts ZeRO-3's 3M per step as cross-node this way): its bus bytes count as inter-node;
// over one node's ranks, as intra-node. all_to_all counts exactly: the chunks for ranks on
// other nodes are inter-node, the rest intra-node (all_to_allv's likewise). A send or recv is inter-node when its
// peer is on another node. Without a node map every rank is on one node.
//
// split() returns a CountingCommunicator over the wrapped communicator's split that shares
// this one's counters: the traffic of every group derived from one counting communicator
// (e.g. a ProcessGrid built on it: tp, dp, pp, intra/inter-node) adds up in one place.
// With a node map of several nodes, split() learns its ranks' nodes by an all_gather over
// the new communicator (of host memory: the wrapped communicator must take host tensors).
// counting_alongside() wraps another communicator into the same counters. reset() clears
// them for all of those communicators. Counters are guarded by a mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace triad::parallel {

struct CollectiveStats {
  int64_t calls = 0;
  double payload_bytes = 0;
  double bus_bytes = 0;
  double inter_node_bus_bytes = 0;  // of bus_bytes; the rest is intra-node
};

class CountingCommunicator : public Communicator {
 public:
  // nodes: the node of each rank of inner (size() entries; empty: all on one node).
  explicit CountingCommunicator(CommunicatorPtr inner, std::vector<int> nodes = {});
  // A communicator counting into this one's counters: inner with its ranks' nodes.
  std::shared_ptr<CountingCommunicator> counting_alongside(CommunicatorPtr inner, std::vector<int> nodes = {}) const;

  // Per kind: "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
  // "send", "recv" — all seven present, zero when unused.
  std::map<std::string, CollectiveStats> stats() const;
  double bus_bytes() const;             // total over all kinds
  double inter_node_bus_bytes() const;  // of that, between nodes
  void reset();
  // {"bus_bytes": total, "intra_node_bus_bytes", "inter_node_bus_bytes", "by_collective":
  // {"all_reduce": {"calls", "payload_bytes", "bus_bytes", "inter_node_bus_bytes"}, ...}}
  // with every kind present.
  nlohmann::json to_json() const;
  const std::vector<int>& nodes() const { return nodes_; }

  const void* mpi_handle() const override { return inner_->mpi_handle(); }
  const CommunicatorPtr& inner() const { return inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return "counting(" + inner_->name() + ")"; }
  void set_axis(const std::string& axis) override {
    Communicator::set_axis(axis);
    inner_->set_axis(axis);
  }
  std::shared_ptr<Communicator> split(int color, int key) override;

  WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum) override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output) override;
  WorkPtr all_to_all(const Tensor& input, const Tensor& output) override;
  WorkPtr all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                      const std::vector<int64_t>& recv_counts) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr send(const Tensor& t, int dst, int tag = 0) override;
  WorkPtr recv(const Tensor& t, int src, int tag = 0) override;
  using Communicator::send_recv;
  WorkPtr send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src, int recv_tag) override;
  void barrier() override { inner_->barrier(); }

 private:
  struct Counters {
    mutable std::mutex mutex;
    std::map<std::string, CollectiveStats> by_kind;
  };
  CountingCommunicator(CommunicatorPtr inner, std::vector<int> nodes, std::shared_ptr<Counters> counters);
  // bus = S * num / den, of which inter_fraction between nodes.
  void record(const char* kind, double payload_bytes, double bus_num, double bus_den, double inter_fraction);
  void record_bus(const char* kind, double payload_bytes, double bus_bytes, double inter_node_bus_bytes);
  double spans_nodes() const { return multi_node_ ? 1.0 : 0.0; }  // a ring collective's inter fraction
  double off_node(int peer) const;  // 1 when peer is on another node

  CommunicatorPtr inner_;
  std::vector<int> nodes_;
  bool multi_node_ = false;
  std::shared_ptr<Counters> counters_;
};

}  // namespace triad::parallel
