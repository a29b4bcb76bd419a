// ZeRO-Offload's parameter shards in host memory (offload_param.device "cpu" on a GPU;
// zero/param_backend.h): each slot is a host buffer of one shard, pinned with
// offload_param.pin_memory (zero/host_copies.h). A read allocates the shard on the device
// and copies the slot into it, a write copies the shard back: with pinned buffers both are
// queued on the device's communication stream behind the work the calling thread queued so
// far (a read's finish() makes the calling thread's current stream wait for it, without
// blocking the host; a write's waits on the host), without them each copy is done when the
// call returns.
#pragma once

#include <cstdint>
#include <vector>

#include "zero/host_copies.h"
#include "zero/param_backend.h"

namespace triad::zero {

class ParamHostBackend final : public ParamBackend {
 public:
  // device: the training device (the CPU too: ParamOffloadConfig::host_store_on_cpu).
  ParamHostBackend(Device device, bool pinned);

  size_t add(const Tensor& shard) override;
  std::unique_ptr<ParamTransfer> read(size_t slot) override;
  std::unique_ptr<ParamTransfer> write(size_t slot, const Tensor& shard) override;
  Tensor host_slot(size_t slot) const override { return slots_.at(slot); }
  int64_t file_bytes() const override { return 0; }
  int64_t host_bytes() const override { return bytes_; }
  double read_seconds() const override { return read_seconds_; }
  const std::string& path() const override { return path_; }

 private:
  Device device_;
  HostCopies copies_;
  std::vector<Tensor> slots_;  // host buffers, 1-d
  int64_t bytes_ = 0;
  double read_seconds_ = 0;  // in read(): the copies themselves when they are not queued
  std::string path_;         // (none)
};

}  // namespace triad::zero
