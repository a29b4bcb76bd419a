#include "parallel/counting_communicator.h"

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

CountingCommunicator::CountingCommunicator(CommunicatorPtr inner)
    : CountingCommunicator(std::move(inner), std::make_shared<Counters>()) {}

CountingCommunicator::CountingCommunicator(CommunicatorPtr inner, std::shared_ptr<Counters> counters)
    : inner_(std::move(inner)), counters_(std::move(counters)) {
  TRIAD_CHECK(inner_ != nullptr, "CountingCommunicator: the wrapped communicator is null");
  std::lock_guard lock(counters_->mutex);
  if (counters_->by_kind.empty()) counters_->by_kind = empty_stats();
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

void CountingCommunicator::reset() {
  std::lock_guard lock(counters_->mutex);
  counters_->by_kind = empty_stats();
}

nlohmann::json CountingCommunicator::to_json() const {
  nlohmann::json by = nlohmann::json::object();
  double total = 0;
  for (const auto& [kind, s] : stats()) {
    by[kind] = {{"calls", s.calls}, {"payload_bytes", s.payload_bytes}, {"bus_bytes", s.bus_bytes}};
    total += s.bus_bytes;
  }
  return {{"bus_bytes", total}, {"by_collective", by}};
}

std::shared_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  return std::shared_ptr<Communicator>(new CountingCommunicator(inner_->split(color, key), counters_));
}

void CountingCommunicator::record(const char* kind, double payload_bytes, double bus_num, double bus_den) {
  std::lock_guard lock(counters_->mutex);
  CollectiveStats& s = counters_->by_kind[kind];
  s.calls += 1;
  s.payload_bytes += payload_bytes;
  s.bus_bytes += payload_bytes * bus_num / bus_den;  // one rounding: exact whenever S * num / den is
}

WorkPtr CountingCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  WorkPtr w = inner_->all_reduce(t, op);
  const double n = size();
  record("all_reduce", double(t.nbytes()), 2 * (n - 1), n);
  return w;
}

WorkPtr CountingCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  WorkPtr w = inner_->reduce_scatter(input, output, op);
  const double n = size();
  record("reduce_scatter", double(input.nbytes()), n - 1, n);
  return w;
}

WorkPtr CountingCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  WorkPtr w = inner_->all_gather(input, output);
  const double n = size();
  record("all_gather", double(output.nbytes()), n - 1, n);
  return w;
}

WorkPtr CountingCommunicator::all_to_all(const Tensor& input, const Tensor& output) {
  WorkPtr w = inner_->all_to_all(input, output);
  const double n = size();
  record("all_to_all", double(input.nbytes()), n - 1, n);
  return w;
}

WorkPtr CountingCommunicator::broadcast(const Tensor& t, int root) {
  WorkPtr w = inner_->broadcast(t, root);
  record("broadcast", double(t.nbytes()), 1, 1);
  return w;
}

WorkPtr CountingCommunicator::send(const Tensor& t, int dst, int tag) {
  WorkPtr w = inner_->send(t, dst, tag);
  record("send", double(t.nbytes()), 1, 1);
  return w;
}

WorkPtr CountingCommunicator::recv(const Tensor& t, int src, int tag) {
  WorkPtr w = inner_->recv(t, src, tag);
  record("recv", double(t.nbytes()), 1, 1);
  return w;
}

// Counted as the send and the recv it is made of.
WorkPtr CountingCommunicator::send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src,
                                        int recv_tag) {
  WorkPtr w = inner_->send_recv(send, dst, send_tag, recv, src, recv_tag);
  record("send", double(send.nbytes()), 1, 1);
  record("recv", double(recv.nbytes()), 1, 1);
  return w;
}

}  // namespace triad::parallel
