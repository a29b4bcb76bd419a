// The argument checks of every Communicator, in one place, so that MPI, NCCL and the
// collectives benchmark reject the same bad calls with the same messages. A communicator
// runs them on the calling rank before it starts any communication: a bad call then
// throws triad::Error there (naming the call, the tensors and what was expected) instead
// of leaving the other ranks waiting in a collective that never matches.
//
// What is checked, per collective (communicator.h states the contract):
// - every tensor: defined, on a device the communicator takes, contiguous, and at most the
//   element count one call of its transport takes;
// - input and output: the same dtype and the same device;
// - sizes: reduce_scatter's input and all_gather's output hold size() chunks of the other
//   tensor's size; all_to_all's input and output both hold size() * k elements;
//   all_to_allv's hold the sums of their size() counts, none negative, and this rank's
//   own chunk is as long both ways;
// - overlap: reduce_scatter's output and all_gather's input are either disjoint from the
//   other tensor or exactly chunk rank() of it (in place); all_to_all's input and output
//   are disjoint or the same buffer; all_to_allv's are disjoint;
// - ranks (broadcast's root, send's destination, recv's source) in [0, size()), tags in
//   [0, the transport's upper bound], split colors >= 0.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace triad::parallel {

// The most elements one MPI call takes: its counts are ints.
inline constexpr int64_t kMpiMaxCount = std::numeric_limits<int>::max();

// Which devices a communicator's tensors may live on.
class DeviceRule {
 public:
  // Tensors on `device` only (an NCCL communicator's GPU). `owner` names the communicator
  // in messages: "this NCCL communicator".
  static DeviceRule only(Device device, std::string owner);
  // Host tensors, and tensors on a device whose backend stages them through host memory
  // (a DeviceStaging is registered for its type: device_staging.h).
  static DeviceRule host_or_staged(std::string owner);

  bool accepts(Device device) const;
  // What the communicator takes, for an error message: "this NCCL communicator takes
  // tensors on cuda:0".
  std::string describe() const;

 private:
  DeviceRule(std::string owner, Device device, bool staged);
  std::string owner_;
  Device device_;
  bool staged_;
};

// The checks of one communicator: its rank and size, the devices it takes, and its
// transport's limits. Each collective's method throws Error on the first violated rule
// and returns normally otherwise; those with an in-place form return whether the call is
// in place.
class CollectiveChecks {
 public:
  CollectiveChecks(int rank, int size, DeviceRule devices, int64_t max_count, int max_tag);

  void all_reduce(const Tensor& t) const;
  // true: output is chunk rank() of the input.
  bool reduce_scatter(const Tensor& input, const Tensor& output) const;
  // true: input is chunk rank() of the output.
  bool all_gather(const Tensor& input, const Tensor& output) const;
  // true: input and output are the same buffer.
  bool all_to_all(const Tensor& input, const Tensor& output) const;
  void all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                   const std::vector<int64_t>& recv_counts) const;
  void broadcast(const Tensor& t, int root) const;
  // send and recv return t's element count.
  int64_t send(const Tensor& t, int dst, int tag) const;
  // send's and recv's checks, and that the two tensors do not overlap; returns the
  // element counts of send and recv.
  std::pair<int64_t, int64_t> send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src,
                                        int recv_tag) const;
  int64_t recv(const Tensor& t, int src, int tag) const;
  void split(int color) const;

 private:
  // Returns t's element count.
  int64_t tensor(const char* call, const char* what, const Tensor& t) const;

  int rank_, size_;
  DeviceRule devices_;
  int64_t max_count_;
  int max_tag_;
};

// Single rules, for callers that check arguments of their own against the same limits (a
// benchmark's options). Messages start with `context`.
// `rank` is in [0, size): "<context>: <role> <rank> is not a rank of a communicator of size N".
void check_rank(const std::string& context, const char* role, int rank, int size);
// `count` elements fit one call that takes at most max_count.
void check_count(const std::string& context, int64_t count, int64_t max_count);

}  // namespace triad::parallel
