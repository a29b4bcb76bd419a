// The tensor layer's seam for devices other than the CPU. A device runtime (the CUDA
// backend's, cuda/runtime.cu) registers itself while its library loads, before main; the
// tensor layer knows it only through this interface, never through its headers. The first
// time a tensor asks for a device of that type, the runtime installs its allocators
// (allocator.h) and backend (backend.h); crossings between the host and the device go
// through it. With none registered, the build has no such backend, and asking says so.
#pragma once

#include <functional>
#include <memory>

#include "tensor/tensor.h"

namespace triad {

// Device work recorded once and replayed (a CUDA graph): every launch with the arguments it
// had when recorded, so whatever changes between replays lives in device memory (Note
// [Positions on the device] in tensor/ops.h). Memory the recording allocated is its own while
// the graph lives; memory it reads that was allocated before must outlive it.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Enqueues the recorded work on the stream it was recorded from; the host does not wait.
  virtual void replay() = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // Registers the allocator of every visible device and the backend (register_allocator,
  // register_backend), once per process; later calls return at once.
  virtual void install() = 0;
  // A contiguous copy of host tensor t on `device`, and of device tensor t on the host.
  virtual Tensor to_device(const Tensor& t, Device device) = 0;
  virtual Tensor to_host(const Tensor& t) = 0;
  // Host tensor src into device tensor dst (contiguous, same shape and dtype), as
  // to_device copies: ordered on dst's device's current stream, src free to change on return.
  virtual void copy_to_device(const Tensor& dst, const Tensor& src) = 0;
  // Records what `work` enqueues on `device`'s current stream into a graph, without running
  // it: the host side of `work` runs (once, now), its device work only when replayed. Throws
  // Error saying why when the work cannot be recorded (it throws, makes the host wait for
  // the device, ...): then nothing of its device work ran, and the caller runs it plainly.
  virtual std::unique_ptr<DeviceGraph> record(Device device, const std::function<void()>& work) = 0;
};

// Registers the runtime of a non-CPU device type (done once, by the runtime itself).
void register_device_runtime(DeviceType type, DeviceRuntime* runtime);
// The installed runtime of device's type; throws Error naming the device when this build
// has none.
DeviceRuntime& device_runtime(Device device);

// Host tensor src into dst (contiguous, same shape and dtype) on any device: on the CPU a
// plain copy, else DeviceRuntime::copy_to_device (ordered on the device's current stream,
// src free to change on return).
void copy_from_host(const Tensor& dst, const Tensor& src);

}  // namespace triad
