// Note [Staged collectives] (staged_collectives.h): host copies in, the host collective,
// the result back.
#include "parallel/staged_collectives.h"

#include <array>
#include <atomic>
#include <exception>
#include <utility>

#include "tensor/ops.h"

namespace triad::parallel {

namespace {

// Indexed by DeviceType. Written once by a backend's install, read on every staged call.
std::array<std::atomic<DeviceStaging*>, 2> g_staging{};

DeviceStaging& staging_for(const Tensor& t) {
  DeviceStaging* s = device_staging(t.device().type);
  TRIAD_ASSERT_MSG(s != nullptr, "no device staging for " << t.str() << " (the communicator's checks let it through)");
  return *s;
}

// A host Work whose result goes back to a device when it completes (step 4 of the Note).
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr host, DeviceStaging& staging, Tensor device_result, Tensor host_result)
      : host_(std::move(host)),
        staging_(staging),
        device_result_(std::move(device_result)),
        host_result_(std::move(host_result)) {}

  ~StagedWork() override {
    // Unwinding after an error: the host Work abandons its operation (MpiWork), and the
    // result is not wanted.
    if (waited_ || failed_ || std::uncaught_exceptions() > 0) return;
    try {
      wait();
    } catch (const std::exception&) {
      // A destructor cannot report; the error is dropped, as MpiWork's destructor drops its own.
    }
  }

  void wait() override {
    if (failed_) return;
    if (!copy_) {
      guard([&] { host_->wait(); });
      copy_back();
    }
    copy_->order_current();
    waited_ = true;
  }

  bool test() override {
    if (failed_) return true;
    if (!copy_) {
      bool complete = false;
      guard([&] { complete = host_->test(); });
      if (!complete) return false;
      copy_back();
    }
    return copy_->done();
  }

 private:
  // A host operation that failed (a receive of the wrong size) leaves nothing to copy back.
  template <class F>
  void guard(F&& f) {
    try {
      f();
    } catch (...) {
      failed_ = true;
      throw;
    }
  }

  void copy_back() {
    copy_ = staging_.to_device(device_result_, host_result_);
    device_result_ = Tensor();
    host_result_ = Tensor();
  }

  WorkPtr host_;
  DeviceStaging& staging_;
  Tensor device_result_, host_result_;  // until the copy back is queued
  std::unique_ptr<DeviceCopy> copy_;
  bool waited_ = false, failed_ = false;
};

// Steps 1 and 2 of the Note for an input; returns its host copy.
Tensor stage_in(DeviceStaging& staging, const Tensor& t) {
  Tensor host = staging.host_buffer(t.numel(), t.dtype());
  staging.to_host(host, t);
  return host;
}

WorkPtr copy_back(WorkPtr host_work, DeviceStaging& staging, const Tensor& device_result, const Tensor& host_result) {
  return std::make_unique<StagedWork>(std::move(host_work), staging, device_result, host_result);
}

}  // namespace

void register_device_staging(DeviceType type, DeviceStaging* staging) { g_staging.at(size_t(type)) = staging; }

DeviceStaging* device_staging(DeviceType type) { return g_staging.at(size_t(type)).load(); }

namespace staged {

WorkPtr all_reduce(Communicator& host, const Tensor& t, ReduceOp op) {
  DeviceStaging& s = staging_for(t);
  s.order_after_current(t.device());
  const Tensor buffer = stage_in(s, t);
  return copy_back(host.all_reduce(buffer, op), s, t, buffer);
}

WorkPtr reduce_scatter(Communicator& host, const Tensor& input, const Tensor& output, ReduceOp op) {
  DeviceStaging& s = staging_for(input);
  s.order_after_current(input.device());
  const Tensor in = stage_in(s, input);
  const Tensor out = s.host_buffer(output.numel(), output.dtype());
  return copy_back(host.reduce_scatter(in, out, op), s, output, out);
}

WorkPtr all_gather(Communicator& host, const Tensor& input, const Tensor& output) {
  DeviceStaging& s = staging_for(input);
  s.order_after_current(input.device());
  // The input goes straight to its chunk of the host output: the host call is in place.
  const Tensor out = s.host_buffer(output.numel(), output.dtype());
  const Tensor in = ops::narrow(out, 0, host.rank() * input.numel(), input.numel());
  s.to_host(in, input);
  return copy_back(host.all_gather(in, out), s, output, out);
}

WorkPtr all_to_all(Communicator& host, const Tensor& input, const Tensor& output) {
  DeviceStaging& s = staging_for(input);
  s.order_after_current(input.device());
  const Tensor in = stage_in(s, input);
  const Tensor out = s.host_buffer(output.numel(), output.dtype());
  return copy_back(host.all_to_all(in, out), s, output, out);
}

WorkPtr all_to_allv(Communicator& host, const Tensor& input, const std::vector<int64_t>& send_counts,
                    const Tensor& output, const std::vector<int64_t>& recv_counts) {
  DeviceStaging& s = staging_for(input);
  s.order_after_current(input.device());
  const Tensor in = stage_in(s, input);
  const Tensor out = s.host_buffer(output.numel(), output.dtype());
  return copy_back(host.all_to_allv(in, send_counts, out, recv_counts), s, output, out);
}

WorkPtr broadcast(Communicator& host, const Tensor& t, int root) {
  DeviceStaging& s = staging_for(t);
  s.order_after_current(t.device());
  if (host.rank() == root) return host.broadcast(stage_in(s, t), root);  // the root's tensor is the result
  const Tensor buffer = s.host_buffer(t.numel(), t.dtype());
  return copy_back(host.broadcast(buffer, root), s, t, buffer);
}

WorkPtr send(Communicator& host, const Tensor& t, int dst, int tag) {
  DeviceStaging& s = staging_for(t);
  s.order_after_current(t.device());
  return host.send(stage_in(s, t), dst, tag);
}

WorkPtr recv(Communicator& host, const Tensor& t, int src, int tag) {
  DeviceStaging& s = staging_for(t);
  s.order_after_current(t.device());
  const Tensor buffer = s.host_buffer(t.numel(), t.dtype());
  return copy_back(host.recv(buffer, src, tag), s, t, buffer);
}

}  // namespace staged

}  // namespace triad::parallel
