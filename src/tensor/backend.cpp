#include "tensor/backend.h"

#include "tensor/cpu/cpu_backend.h"
#include "tensor/device_runtime.h"

namespace triad {

namespace {
Backend* g_cuda_backend = nullptr;
}

Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu_backend();
  device_runtime(device);  // installs the CUDA backend on first use
  TRIAD_ASSERT(g_cuda_backend != nullptr);
  return *g_cuda_backend;
}

void register_backend(DeviceType type, Backend* backend) {
  TRIAD_ASSERT(type == DeviceType::cuda);
  g_cuda_backend = backend;
}

}  // namespace triad
