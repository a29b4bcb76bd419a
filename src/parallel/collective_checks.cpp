// The argument checks of every Communicator (see the header). Messages are formatted only
// when a check fails, in cold functions: the checks run on every call, and a small message
// takes less time than formatting a tensor's description.
#include "parallel/collective_checks.h"

#include <cstddef>
#include <utility>

#include "parallel/staged_collectives.h"

namespace triad::parallel {

namespace {

// A tensor's bytes, found once per check (the checks of the placements compare them).
struct Bytes {
  const char* begin;
  size_t size;
};
Bytes bytes_of(const Tensor& t) { return {static_cast<const char*>(t.raw_data()), t.nbytes()}; }

bool overlap(Bytes a, Bytes b) {
  return a.size > 0 && b.size > 0 && a.begin < b.begin + b.size && b.begin < a.begin + a.size;
}

// Whether `part` is chunk `rank` of `whole` (chunks of part's size; the dtypes agree).
bool is_chunk(Bytes part, Bytes whole, int rank) {
  return part.size > 0 && part.begin == whole.begin + size_t(rank) * part.size;
}

void check_same_dtype_and_device(const char* call, const Tensor& input, const Tensor& output) {
  TRIAD_CHECK(input.dtype() == output.dtype(),
              call << ": input " << input.str() << " and output " << output.str() << " must have the same dtype");
  TRIAD_CHECK(input.device() == output.device(),
              call << ": input " << input.str() << " and output " << output.str() << " must be on the same device");
}

[[gnu::cold, gnu::noinline, noreturn]] void throw_bad_tag(const char* call, int tag, int max_tag) {
  std::ostringstream os;
  os << call << ": tag " << tag << " outside [0, " << max_tag << "]";
  throw Error(os.str());
}

[[gnu::cold, gnu::noinline, noreturn]] void throw_bad_peer(const char* call, const char* role, int peer, int size,
                                                           const Tensor& t) {
  std::ostringstream os;
  os << call << ": " << role << " " << peer << " is not a rank of a communicator of size " << size << " (tensor "
     << t.str() << ")";
  throw Error(os.str());
}

[[gnu::cold, gnu::noinline, noreturn]] void throw_send_recv_overlap(const Tensor& send, const Tensor& recv) {
  throw Error("send_recv: recv tensor " + recv.str() + " overlaps send tensor " + send.str() +
              "; a message cannot be received into the buffer it is sent from");
}

void check_peer(const char* call, const char* role, int peer, int size, const Tensor& t) {
  if (peer < 0 || peer >= size) throw_bad_peer(call, role, peer, size, t);
}

// Throws the message of the first rule of CollectiveChecks::tensor that t breaks (off the
// common path: only a failed check comes here).
[[gnu::cold, gnu::noinline, noreturn]] void explain_tensor(const char* call, const char* what, const Tensor& t,
                                                           const DeviceRule& devices, int64_t max_count) {
  TRIAD_CHECK(t.defined(), call << ": " << what << " is an undefined tensor");
  TRIAD_CHECK(devices.accepts(t.device()),
              call << ": " << what << " " << t.str() << " is on " << t.device().str() << "; " << devices.describe());
  TRIAD_CHECK(t.is_contiguous(),
              call << ": " << what << " " << t.str() << " must be contiguous, has strides " << shape_str(t.strides()));
  if (t.numel() > max_count) check_count(std::string(call) + ": " + what + " " + t.str(), t.numel(), max_count);
  TRIAD_ASSERT_MSG(false, call << ": " << what << " " << t.str() << " failed the check and broke no rule");
}

}  // namespace

DeviceRule::DeviceRule(std::string owner, Device device, bool staged)
    : owner_(std::move(owner)), device_(device), staged_(staged) {}

DeviceRule DeviceRule::only(Device device, std::string owner) { return DeviceRule(std::move(owner), device, false); }

DeviceRule DeviceRule::host_or_staged(std::string owner) { return DeviceRule(std::move(owner), Device::cpu(), true); }

bool DeviceRule::accepts(Device device) const {
  if (!staged_) return device == device_;
  return device.is_cpu() || device_staging(device.type) != nullptr;
}

std::string DeviceRule::describe() const {
  if (!staged_) return owner_ + " takes tensors on " + device_.str();
  return owner_ + " takes cpu tensors, and device tensors where the device's backend stages them through host memory";
}

CollectiveChecks::CollectiveChecks(int rank, int size, DeviceRule devices, int64_t max_count, int max_tag)
    : rank_(rank), size_(size), devices_(std::move(devices)), max_count_(max_count), max_tag_(max_tag) {}

int64_t CollectiveChecks::tensor(const char* call, const char* what, const Tensor& t) const {
  // Every rule in one test on the common path; explain_tensor finds the broken one.
  if (t.defined() && devices_.accepts(t.device()) && t.is_contiguous()) {
    const int64_t count = t.numel();
    if (count <= max_count_) return count;
  }
  explain_tensor(call, what, t, devices_, max_count_);
}

void CollectiveChecks::all_reduce(const Tensor& t) const { tensor("all_reduce", "tensor", t); }

bool CollectiveChecks::reduce_scatter(const Tensor& input, const Tensor& output) const {
  tensor("reduce_scatter", "input", input);
  tensor("reduce_scatter", "output", output);
  check_same_dtype_and_device("reduce_scatter", input, output);
  const int64_t k = output.numel();
  TRIAD_CHECK(input.numel() == k * size_, "reduce_scatter: input "
                                              << input.str() << " has " << input.numel()
                                              << " elements, expected size() * output elements = " << size_ << " * "
                                              << k << " = " << k * size_ << " (output " << output.str() << ")");
  const Bytes in = bytes_of(input), out = bytes_of(output);
  const bool in_place = is_chunk(out, in, rank_);
  TRIAD_CHECK(in_place || !overlap(in, out), "reduce_scatter: output "
                                                 << output.str() << " overlaps input " << input.str()
                                                 << "; in place, output must be chunk rank() of the input");
  return in_place;
}

bool CollectiveChecks::all_gather(const Tensor& input, const Tensor& output) const {
  tensor("all_gather", "input", input);
  tensor("all_gather", "output", output);
  check_same_dtype_and_device("all_gather", input, output);
  const int64_t k = input.numel();
  TRIAD_CHECK(output.numel() == k * size_, "all_gather: output "
                                               << output.str() << " has " << output.numel()
                                               << " elements, expected size() * input elements = " << size_ << " * "
                                               << k << " = " << k * size_ << " (input " << input.str() << ")");
  const Bytes in = bytes_of(input), out = bytes_of(output);
  const bool in_place = is_chunk(in, out, rank_);
  TRIAD_CHECK(in_place || !overlap(in, out), "all_gather: input "
                                                 << input.str() << " overlaps output " << output.str()
                                                 << "; in place, input must be chunk rank() of the output");
  return in_place;
}

bool CollectiveChecks::all_to_all(const Tensor& input, const Tensor& output) const {
  tensor("all_to_all", "input", input);
  tensor("all_to_all", "output", output);
  check_same_dtype_and_device("all_to_all", input, output);
  TRIAD_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0,
              "all_to_all: input " << input.str() << " and output " << output.str()
                                   << " must both have size() * k elements, size() = " << size_);
  const Bytes in = bytes_of(input), out = bytes_of(output);
  if (!overlap(in, out)) return false;
  TRIAD_CHECK(in.begin == out.begin, "all_to_all: input " << input.str() << " partly overlaps output " << output.str()
                                                          << "; they must be disjoint or the same");
  return true;
}

namespace {

// counts: one per rank, none negative, summing to t's elements.
void check_counts(const char* which, const std::vector<int64_t>& counts, const Tensor& t, int size) {
  int64_t total = 0;
  bool negative = false;
  for (const int64_t c : counts) total += c, negative = negative || c < 0;
  TRIAD_CHECK(int(counts.size()) == size && !negative && total == t.numel(),
              "all_to_allv: " << which << " counts must be " << size << " counts >= 0 summing to the " << t.numel()
                              << " elements of " << t.str() << ", got " << counts.size() << " counts summing to "
                              << total);
}

}  // namespace

void CollectiveChecks::all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                                   const std::vector<int64_t>& recv_counts) const {
  tensor("all_to_allv", "input", input);
  tensor("all_to_allv", "output", output);
  check_same_dtype_and_device("all_to_allv", input, output);
  check_counts("send", send_counts, input, size_);
  check_counts("receive", recv_counts, output, size_);
  const size_t own = size_t(rank_);
  TRIAD_CHECK(send_counts[own] == recv_counts[own], "all_to_allv: this rank ("
                                                        << rank_ << ") sends itself " << send_counts[own]
                                                        << " elements but expects " << recv_counts[own]);
  TRIAD_CHECK(!overlap(bytes_of(input), bytes_of(output)),
              "all_to_allv: input " << input.str() << " overlaps output " << output.str());
}

void CollectiveChecks::broadcast(const Tensor& t, int root) const {
  tensor("broadcast", "tensor", t);
  check_peer("broadcast", "root", root, size_, t);
}

int64_t CollectiveChecks::send(const Tensor& t, int dst, int tag) const {
  const int64_t count = tensor("send", "tensor", t);
  check_peer("send", "destination", dst, size_, t);
  if (tag < 0 || tag > max_tag_) throw_bad_tag("send", tag, max_tag_);
  return count;
}

int64_t CollectiveChecks::recv(const Tensor& t, int src, int tag) const {
  const int64_t count = tensor("recv", "tensor", t);
  check_peer("recv", "source", src, size_, t);
  if (tag < 0 || tag > max_tag_) throw_bad_tag("recv", tag, max_tag_);
  return count;
}

std::pair<int64_t, int64_t> CollectiveChecks::send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv,
                                                        int src, int recv_tag) const {
  const int64_t sent = tensor("send_recv", "send tensor", send);
  const int64_t received = tensor("send_recv", "recv tensor", recv);
  check_peer("send_recv", "destination", dst, size_, send);
  check_peer("send_recv", "source", src, size_, recv);
  for (const int tag : {send_tag, recv_tag})
    if (tag < 0 || tag > max_tag_) throw_bad_tag("send_recv", tag, max_tag_);
  if (send.storage() == recv.storage() && overlap(bytes_of(send), bytes_of(recv))) throw_send_recv_overlap(send, recv);
  return {sent, received};
}

void CollectiveChecks::split(int color) const {
  TRIAD_CHECK(color >= 0, "split: color must be >= 0, got " << color << " (rank " << rank_ << ")");
}

void check_rank(const std::string& context, const char* role, int rank, int size) {
  TRIAD_CHECK(rank >= 0 && rank < size,
              context << ": " << role << " " << rank << " is not a rank of a communicator of size " << size);
}

void check_count(const std::string& context, int64_t count, int64_t max_count) {
  TRIAD_CHECK(count <= max_count,
              context << " has " << count << " elements, more than the " << max_count << " one call takes");
}

}  // namespace triad::parallel
