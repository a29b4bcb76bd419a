// The tensor layer's seam for devices other than the CPU. A device runtime (the CUDA
// backend's, cuda/runtime.cu) registers itself while its library loads, before main; the
// tensor layer knows it only through this interface, never through its headers. The first
// time a tensor asks for a device of that type, the runtime installs its allocators
// (allocator.h) and backend (backend.h); crossings between the host and the device go
// through it. With none registered, the build has no such backend, and asking says so.
#pragma once

#include "tensor/tensor.h"

namespace triad {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // Registers the allocator of every visible device and the backend (register_allocator,
  // register_backend), once per process; later calls return at once.
  virtual void install() = 0;
  // A contiguous copy of host tensor t on `device`, and of device tensor t on the host.
  virtual Tensor to_device(const Tensor& t, Device device) = 0;
  virtual Tensor to_host(const Tensor& t) = 0;
};

// Registers the runtime of a non-CPU device type (done once, by the runtime itself).
void register_device_runtime(DeviceType type, DeviceRuntime* runtime);
// The installed runtime of device's type; throws Error naming the device when this build
// has none.
DeviceRuntime& device_runtime(Device device);

}  // namespace triad
