#include "parallel/counting_communicator.h"

#include <algorithm>
#include <utility>

namespace triad::parallel {

namespace {

constexpr const char* kKinds[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                                  "broadcast",  "send",           "recv"};

std::map<std::string, CollectiveStats> empty_stats() {
  std::map<std::string, CollectiveStats> m;
  for (const char* k : kKinds) m[k] = {};
  return m;
}

}  // namespace

CountingCommunicator::CountingCommunicator(CommunicatorPtr inner, std::vector<int> nodes)
    : CountingCommunicator(std::move(inner), std::move(nodes), std::make_shared<Counters>()) {}

CountingCommunicator::CountingCommunicator(CommunicatorPtr inner, std::vector<int> nodes,
                                           std::shared_ptr<Counters> counters)
    : inner_(std::move(inner)), nodes_(std::move(nodes)), counters_(std::move(counters)) {
  TRIAD_CHECK(inner_ != nullptr, "CountingCommunicator: the wrapped communicator is null");
  TRIAD_CHECK(nodes_.empty() || int(nodes_.size()) == inner_->size(),
              "CountingCommunicator: " << nodes_.size() << " node entries for " << inner_->size() << " ranks");
  multi_node_ = std::any_of(nodes_.begin(), nodes_.end(), [&](int n) { return n != nodes_.front(); });
  std::lock_guard lock(counters_->mutex);
  if (counters_->by_kind.empty()) counters_->by_kind = empty_stats();
}

std::shared_ptr<CountingCommunicator> CountingCommunicator::counting_alongside(CommunicatorPtr inner,
                                                                               std::vector<int> nodes) const {
  return std::shared_ptr<CountingCommunicator>(new CountingCommunicator(std::move(inner), std::move(nodes), counters_));
}

double CountingCommunicator::off_node(int peer) const {
  return multi_node_ && nodes_[size_t(peer)] != nodes_[size_t(rank())] ? 1.0 : 0.0;
}

std::map<std::string, CollectiveStats> CountingCommunicator::stats() const {
  std::lock_guard lock(counters_->mutex);
  return counters_->by_kind;
}

double CountingCommunicator::bus_bytes() const {
  std::lock_guard lock(counters_->mutex);
  double total = 0;
  for (const auto& [kind, s] : counters_->by_kind) total += s.bus_bytes;
  return total;
}

double CountingCommunicator::inter_node_bus_bytes() const {
  std::lock_guard lock(counters_->mutex);
  double total = 0;
  for (const auto& [kind, s] : counters_->by_kind) total += s.inter_node_bus_bytes;
  return total;
}

void CountingCommunicator::reset() {
  std::lock_guard lock(counters_->mutex);
  counters_->by_kind = empty_stats();
}

nlohmann::json CountingCommunicator::to_json() const {
  nlohmann::json by = nlohmann::json::object();
  double total = 0, inter = 0;
  for (const auto& [kind, s] : stats()) {
    by[kind] = {{"calls", s.calls},
                {"payload_bytes", s.payload_bytes},
                {"bus_bytes", s.bus_bytes},
                {"inter_node_bus_bytes", s.inter_node_bus_bytes}};
    total += s.bus_bytes;
    inter += s.inter_node_bus_bytes;
  }
  return {{"bus_bytes", total},
          {"intra_node_bus_bytes", total - inter},
          {"inter_node_bus_bytes", inter},
          {"by_collective", by}};
}

std::shared_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  CommunicatorPtr part = inner_->split(color, key);
  std::vector<int> nodes;
  if (multi_node_) {
    const Tensor mine = Tensor::full({1}, nodes_[size_t(rank())], DType::i32);
    const Tensor all = Tensor::empty({part->size()}, DType::i32);
    part->all_gather(mine, all)->wait();
    nodes = all.to_vector<int32_t>();
  }
  return std::shared_ptr<Communicator>(new CountingCommunicator(std::move(part), std::move(nodes), counters_));
}

void CountingCommunicator::record(const char* kind, double payload_bytes, double bus_num, double bus_den,
                                  double inter_fraction) {
  const double bus = payload_bytes * bus_num / bus_den;  // one rounding: exact whenever S * num / den is
  record_bus(kind, payload_bytes, bus, inter_fraction == 1.0 ? bus : bus * inter_fraction);
}

void CountingCommunicator::record_bus(const char* kind, double payload_bytes, double bus_bytes,
                                      double inter_node_bus_bytes) {
  std::lock_guard lock(counters_->mutex);
  CollectiveStats& s = counters_->by_kind[kind];
  s.calls += 1;
  s.payload_bytes += payload_bytes;
  s.bus_bytes += bus_bytes;
  s.inter_node_bus_bytes += inter_node_bus_bytes;
}

WorkPtr CountingCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  WorkPtr w = inner_->all_reduce(t, op);
  const double n = size();
  record("all_reduce", double(t.nbytes()), 2 * (n - 1), n, spans_nodes());
  return w;
}

WorkPtr CountingCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  WorkPtr w = inner_->reduce_scatter(input, output, op);
  const double n = size();
  record("reduce_scatter", double(input.nbytes()), n - 1, n, spans_nodes());
  return w;
}

WorkPtr CountingCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  WorkPtr w = inner_->all_gather(input, output);
  const double n = size();
  record("all_gather", double(output.nbytes()), n - 1, n, spans_nodes());
  return w;
}

WorkPtr CountingCommunicator::all_to_all(const Tensor& input, const Tensor& output) {
  WorkPtr w = inner_->all_to_all(input, output);
  const double n = size();
  double off = 0;  // peers on other nodes, whose chunks cross
  for (int q = 0; q < size(); ++q) off += off_node(q);
  record("all_to_all", double(input.nbytes()), n - 1, n, n > 1 ? off / (n - 1) : 0.0);
  return w;
}

// The bytes that leave this rank, exactly: its chunks for the other ranks.
WorkPtr CountingCommunicator::all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts,
                                          const Tensor& output, const std::vector<int64_t>& recv_counts) {
  WorkPtr w = inner_->all_to_allv(input, send_counts, output, recv_counts);
  const double element = double(element_size(input.dtype()));
  double bus = 0, inter = 0;
  for (int q = 0; q < size(); ++q)
    if (q != rank()) {
      bus += double(send_counts[size_t(q)]) * element;
      inter += off_node(q) * double(send_counts[size_t(q)]) * element;
    }
  record_bus("all_to_all", double(input.nbytes()), bus, inter);
  return w;
}

WorkPtr CountingCommunicator::broadcast(const Tensor& t, int root) {
  WorkPtr w = inner_->broadcast(t, root);
  record("broadcast", double(t.nbytes()), 1, 1, spans_nodes());
  return w;
}

WorkPtr CountingCommunicator::send(const Tensor& t, int dst, int tag) {
  WorkPtr w = inner_->send(t, dst, tag);
  record("send", double(t.nbytes()), 1, 1, off_node(dst));
  return w;
}

WorkPtr CountingCommunicator::recv(const Tensor& t, int src, int tag) {
  WorkPtr w = inner_->recv(t, src, tag);
  record("recv", double(t.nbytes()), 1, 1, off_node(src));
  return w;
}

// Counted as the send and the recv it is made of.
WorkPtr CountingCommunicator::send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src,
                                        int recv_tag) {
  WorkPtr w = inner_->send_recv(send, dst, send_tag, recv, src, recv_tag);
  record("send", double(send.nbytes()), 1, 1, off_node(dst));
  record("recv", double(recv.nbytes()), 1, 1, off_node(src));
  return w;
}

}  // namespace triad::parallel
