#include "zero/host_copies.h"

#include "tensor/device_runtime.h"
#include "tensor/ops.h"

namespace triad::zero {

HostCopies::HostCopies(Device device, bool pinned)
    : device_(device),
      staging_(device.is_cpu() ? nullptr : parallel::device_staging(device.type)),
      pinned_(pinned && staging_ != nullptr) {}

Tensor HostCopies::host_zeros(int64_t numel, DType dtype) const {
  if (!pinned_) return Tensor::zeros({numel}, dtype);
  Tensor t = staging_->host_buffer(numel, dtype);
  ops::zero_(t);
  return t;
}

HostCopies::Copy HostCopies::to_host(const Tensor& dst, const Tensor& src) const {
  TRIAD_ASSERT(dst.device().is_cpu() && src.device() == device_ && dst.numel() == src.numel());
  if (!staging_) {  // the cpu (where `to` is src itself)
    ops::copy_(dst, ops::to(src, Device::cpu()));
    return nullptr;
  }
  staging_->order_after_current(device_);
  if (!pinned_) {  // straight into the pageable buffer, waiting (no host temporary)
    staging_->to_host(dst, src);
    return nullptr;
  }
  return staging_->to_host_async(dst, src);
}

HostCopies::Copy HostCopies::to_device(const Tensor& dst, const Tensor& src) const {
  TRIAD_ASSERT(src.device().is_cpu() && dst.device() == device_ && dst.numel() == src.numel());
  if (!pinned_) {  // straight into dst, staged by the device runtime (no device temporary)
    copy_from_host(dst, src);
    return nullptr;
  }
  return staging_->to_device(dst, src);
}

void wait(HostCopies::Copy& copy) {
  if (copy) copy->wait();
  copy.reset();
}

}  // namespace triad::zero
