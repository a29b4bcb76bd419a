#include "tensor/backend.h"

#include "cuda/runtime.h"
#include "tensor/cpu/cpu_backend.h"

namespace triad {

namespace {
Backend* g_cuda_backend = nullptr;
}

Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu_backend();
  cuda::install();  // registers the CUDA backend on first use (nothing without one)
  TRIAD_CHECK(g_cuda_backend != nullptr,
              "device " << device.str() << " requested, but this build of triad has no CUDA backend");
  return *g_cuda_backend;
}

void register_backend(DeviceType type, Backend* backend) {
  TRIAD_ASSERT(type == DeviceType::cuda);
  g_cuda_backend = backend;
}

}  // namespace triad
