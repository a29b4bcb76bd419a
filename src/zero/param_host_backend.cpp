#include "zero/param_host_backend.h"

#include <chrono>

#include "parallel/staged_collectives.h"
#include "tensor/ops.h"

namespace triad::zero {

namespace {

// A copy in flight (none: done), and for a read the device shard it fills.
class HostTransfer final : public ParamTransfer {
 public:
  HostTransfer(HostCopies::Copy copy, Tensor shard) : copy_(std::move(copy)), shard_(std::move(shard)) {}
  ~HostTransfer() override {
    try {
      wait(copy_);  // a write's host buffer may go with the backend
    } catch (const std::exception&) {
      // A destructor cannot report; the error is lost with the transfer.
    }
  }

  bool done() override { return !copy_ || copy_->done(); }
  Tensor finish() override {
    if (copy_ && shard_.defined())
      copy_->order_current();  // a read: the device waits, not the host
    else
      wait(copy_);
    copy_.reset();
    return std::move(shard_);
  }

 private:
  HostCopies::Copy copy_;
  Tensor shard_;
};

}  // namespace

ParamHostBackend::ParamHostBackend(Device device, bool pinned) : device_(device), copies_(device, pinned) {}

size_t ParamHostBackend::add(const Tensor& shard) {
  TRIAD_ASSERT(shard.dim() == 1 && shard.device() == device_);
  Tensor slot = copies_.host_zeros(shard.numel(), shard.dtype());
  HostCopies::Copy in = copies_.to_host(slot, ops::contiguous(shard));
  wait(in);
  bytes_ += int64_t(slot.nbytes());
  slots_.push_back(std::move(slot));
  return slots_.size() - 1;
}

std::unique_ptr<ParamTransfer> ParamHostBackend::read(size_t slot) {
  const auto start = std::chrono::steady_clock::now();
  const Tensor& host = slots_.at(slot);
  Tensor shard = Tensor::empty({host.numel()}, host.dtype(), device_);
  // A queued copy runs on the communication stream: after the work queued so far, which may
  // still use the memory the new shard reuses.
  if (copies_.queued()) parallel::device_staging(device_.type)->order_after_current(device_);
  HostCopies::Copy copy = copies_.to_device(shard, host);
  read_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::make_unique<HostTransfer>(std::move(copy), std::move(shard));
}

std::unique_ptr<ParamTransfer> ParamHostBackend::write(size_t slot, const Tensor& shard) {
  return std::make_unique<HostTransfer>(copies_.to_host(slots_.at(slot), ops::contiguous(shard)), Tensor());
}

}  // namespace triad::zero
