// Copies between the training device and host memory for a shard store that keeps its state
// on the host (zero/host_shard_store.h), through the device's staging
// (parallel/staged_collectives.h) and never its API: the same code runs on any device.
// - Queued (a device with a staging, and pinned buffers): host_empty hands out memory the
//   device copies by DMA (CUDA: pinned), and a copy is queued on the device's communication
//   stream; the host waits only in the copy's wait().
// - Otherwise each copy is done when the call returns: on the CPU training device a plain
//   copy; between pageable memory and a GPU (pin_memory false, DeepSpeed's default): to the
//   host straight into the buffer through the staging, to the device straight into the
//   destination through the device runtime, which stages it through its own pinned buffers.
#pragma once

#include <memory>

#include "parallel/staged_collectives.h"
#include "tensor/tensor.h"

namespace triad::zero {

class HostCopies {
 public:
  // A copy in flight; null: done.
  using Copy = std::unique_ptr<parallel::DeviceCopy>;

  // pinned: allocate host buffers the device copies asynchronously (where it can).
  HostCopies(Device device, bool pinned);

  // A 1-d host tensor of `numel` elements, zeroed.
  Tensor host_zeros(int64_t numel, DType dtype) const;
  // src (on the training device, contiguous) into dst (host_zeros' or a contiguous view of
  // one; same dtype and size), after the work queued so far on the calling thread's current
  // stream. dst must not be touched until the copy is done.
  Copy to_host(const Tensor& dst, const Tensor& src) const;
  // src (host_zeros' or a view of one) into dst (on the training device, contiguous). The
  // calling thread's current stream is ordered after it by order_current(). src must not be
  // written until the copy is done.
  Copy to_device(const Tensor& dst, const Tensor& src) const;

  bool queued() const { return pinned_; }

 private:
  Device device_;
  parallel::DeviceStaging* staging_;  // null (the cpu): plain copies
  bool pinned_;                       // host buffers pinned and copies queued
};

// Waits for a copy (none: returns) and forgets it.
void wait(HostCopies::Copy& copy);

}  // namespace triad::zero
