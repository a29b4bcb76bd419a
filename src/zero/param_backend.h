// Where ParamSwap (zero/param_swap.h) keeps the parameter shards it holds out of the
// training device's memory, and the transfers of one shard between there and the device:
// a swap file (zero/param_file_backend.h, offload_param.device "nvme") or host memory
// (zero/param_host_backend.h, "cpu" on a GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/tensor.h"

namespace triad::zero {

// One shard's transfer in flight.
class ParamTransfer {
 public:
  // Waits for it (an error it met is lost with it).
  virtual ~ParamTransfer() = default;
  // Whether finish() would not wait for the transfer; never blocks.
  virtual bool done() = 0;
  // Ends it, rethrowing its error. A read returns the shard on the training device, which
  // work the calling thread queues next may read; a write returns nothing once the slot
  // holds the shard.
  virtual Tensor finish() = 0;
};

class ParamBackend {
 public:
  virtual ~ParamBackend() = default;
  // A slot holding a copy of `shard` (on the training device, 1-d), written when it returns.
  virtual size_t add(const Tensor& shard) = 0;
  // Starts reading a slot's shard onto the training device.
  virtual std::unique_ptr<ParamTransfer> read(size_t slot) = 0;
  // Starts writing `shard` (on the training device; a file's also from host memory) into its
  // slot; what the slot held is lost. The shard's memory is not written to while the
  // transfer lasts.
  virtual std::unique_ptr<ParamTransfer> write(size_t slot, const Tensor& shard) = 0;
  // The host buffer a slot's shard lives in, which the caller may read and write in place
  // while no transfer of the slot is in flight (host memory); undefined (a file).
  virtual Tensor host_slot(size_t) const { return Tensor(); }
  // Bytes the slots take in files and in host memory apart from the device's.
  virtual int64_t file_bytes() const = 0;
  virtual int64_t host_bytes() const = 0;
  // The seconds the reads have taken so far, on whichever thread.
  virtual double read_seconds() const = 0;
  // The swap file's (empty in host memory).
  virtual const std::string& path() const = 0;
};

}  // namespace triad::zero
