#include "tensor/device_runtime.h"

#include "tensor/ops.h"

namespace triad {

namespace {
// Constant-initialized: safe to register into from another library's static initializer.
DeviceRuntime* g_cuda_runtime = nullptr;
}  // namespace

void register_device_runtime(DeviceType type, DeviceRuntime* runtime) {
  TRIAD_ASSERT(type == DeviceType::cuda && runtime != nullptr);
  g_cuda_runtime = runtime;
}

DeviceRuntime& device_runtime(Device device) {
  TRIAD_ASSERT(device.is_cuda());
  TRIAD_CHECK(g_cuda_runtime != nullptr, "device " << device.str()
                                                   << " requested, but this build of triad has no CUDA backend "
                                                      "(configure with TRIAD_CUDA=ON on a machine with nvcc)");
  g_cuda_runtime->install();
  return *g_cuda_runtime;
}

void copy_from_host(const Tensor& dst, const Tensor& src) {
  TRIAD_ASSERT(src.device().is_cpu());
  if (dst.device().is_cpu())
    ops::copy_(dst, src);
  else
    device_runtime(dst.device()).copy_to_device(dst, src);
}

}  // namespace triad
