// Collectives of a host-memory transport (MPI) on tensors that live on a device, staged
// through host buffers. The device side offers the copies (DeviceStaging) and registers
// them for its device type; this layer never sees the device's API.
//
// Note [Staged collectives]: MpiCommunicator takes device tensors by running its host
// collective on host copies of them:
// 1. At the call, the device's communication stream is ordered after the work queued so
//    far on the calling thread's current stream (the producers of the inputs, and every
//    earlier use of the outputs), by an event: the host does not wait for that work here.
// 2. The inputs are copied into host buffers on the communication stream, and the host
//    waits for those copies: the transport reads its send buffers as soon as the
//    operation starts. (So a staged call blocks the host until its inputs exist.)
// 3. The host collective runs on the host buffers, always out of place (in-place device
//    calls stay in place on the device: only the result is copied back).
// 4. When the host operation completes (in wait(), or in the test() that finds it
//    complete), the result is queued back to the device on the communication stream.
//    wait() then makes the calling thread's current stream wait for that copy, without
//    blocking the host, as an NCCL Work does: later work on that stream sees the result.
//    test() is true once the copy itself is done, so the result is then visible to any
//    stream. A Work dropped without either waits in its destructor, like MpiWork.
// The host buffers come from the device side (CUDA: pinned memory, whose copies are plain
// DMA) and go back to its cache once the copies that use them are done.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace triad::parallel {

// A copy between the host and a device in flight.
class DeviceCopy {
 public:
  virtual ~DeviceCopy() = default;
  virtual bool done() = 0;           // complete? never blocks
  virtual void order_current() = 0;  // the calling thread's current stream waits for it
  virtual void wait() = 0;           // the host waits for it
};

// The copies a device backend offers for staging.
class DeviceStaging {
 public:
  virtual ~DeviceStaging() = default;
  // A 1-d host tensor of `numel` elements that copies to and from devices of this type fast.
  virtual Tensor host_buffer(int64_t numel, DType dtype) = 0;
  // Later copies for `device` run after the work queued so far on the calling thread's
  // current stream of it. Does not block the host.
  virtual void order_after_current(Device device) = 0;
  // Copies src (on the device, contiguous) into dst (host, contiguous: a host_buffer or a
  // view of one; same dtype and element count), after what order_after_current ordered
  // before. Returns when the bytes are on the host.
  virtual void to_host(const Tensor& dst, const Tensor& src) = 0;
  // As to_host, but queued: the host waits only in the result's wait(). src's memory stays
  // reserved until the copy is done; dst must outlive it.
  virtual std::unique_ptr<DeviceCopy> to_host_async(const Tensor& dst, const Tensor& src) = 0;
  // Queues a copy of src (a whole host_buffer) into dst (on the device, contiguous; same
  // dtype and element count), after every earlier copy for the device. The memory of both
  // stays reserved until the copy is done, so the caller may drop its tensors at once.
  virtual std::unique_ptr<DeviceCopy> to_device(const Tensor& dst, const Tensor& src) = 0;
};

// Installs the staging of a device type (done by that backend's install); null removes it.
void register_device_staging(DeviceType type, DeviceStaging* staging);
// The staging registered for a device type; null when none is (always for the host).
DeviceStaging* device_staging(DeviceType type);

// The staged collectives of `host`, a communicator over host memory, on device tensors
// (Note [Staged collectives]). Arguments must already have passed host's checks
// (collective_checks.h): contiguous, on one device with a registered staging, sizes and
// ranks valid. Each returns the Work of the whole operation.
namespace staged {
WorkPtr all_reduce(Communicator& host, const Tensor& t, ReduceOp op);
WorkPtr reduce_scatter(Communicator& host, const Tensor& input, const Tensor& output, ReduceOp op);
WorkPtr all_gather(Communicator& host, const Tensor& input, const Tensor& output);
WorkPtr all_to_all(Communicator& host, const Tensor& input, const Tensor& output);
WorkPtr all_to_allv(Communicator& host, const Tensor& input, const std::vector<int64_t>& send_counts,
                    const Tensor& output, const std::vector<int64_t>& recv_counts);
WorkPtr broadcast(Communicator& host, const Tensor& t, int root);
WorkPtr send(Communicator& host, const Tensor& t, int dst, int tag);
WorkPtr recv(Communicator& host, const Tensor& t, int src, int tag);
}  // namespace staged

}  // namespace triad::parallel
