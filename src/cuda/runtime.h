// The CUDA runtime as the rest of triad sees it. Implemented in runtime.cu when the CUDA
// backend is built, and by stub/runtime.cpp otherwise (which reports no devices and fails
// clearly when a device is required).
#pragma once

#include <cstddef>
#include <string>

#include "cuda/caching_allocator.h"
#include "tensor/device_runtime.h"
#include "tensor/error.h"

namespace triad::cuda {

// The most devices a process uses: per-device tables (streams, handles, allocators, error
// records) are arrays of this size.
constexpr int kMaxDevices = 64;
// Throws Error unless device indexes such a table.
inline void check_device_index(int device) {
  TRIAD_CHECK(device >= 0 && device < kMaxDevices,
              "cuda:" << device << " is not a device index triad supports (0.." << kMaxDevices - 1 << ")");
}

bool built();        // whether this build has the CUDA backend
int device_count();  // 0 when not built or no GPU is visible
// A line per visible device ("cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90"); throws
// triad::Error when the backend is not built.
std::string describe_devices();

// What programs report of a device (cudaGetDeviceProperties).
struct DeviceProperties {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability
  size_t total_bytes = 0;    // global memory
  int multiprocessors = 0;
};
// The functions below throw triad::Error when the backend is not built or cuda:device is
// not visible.
DeviceProperties device_properties(int device);
// The host waits for all work queued on cuda:device (stream.h's synchronize_device).
void synchronize(int device);
// Byte counts of cuda:device's caching allocator (device_allocator.h): what tensors hold
// ("allocated") and what it holds from the driver ("reserved"), with their peaks.
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);  // peaks restart from the current values

// The CUDA runtime as the tensor layer sees it (tensor/device_runtime.h): its install()
// registers the caching allocator of every visible device (device_allocator.h), the CUDA
// backend (cuda_backend.h) and the host staging of CUDA tensors (staging.h, for the parallel
// layer), once per process. register_runtime.cu registers it with the tensor layer as the
// program loads; the tensor layer installs it the first time a cuda device is asked for, so
// a program never has to. Only in a build with the backend.
DeviceRuntime& runtime();

}  // namespace triad::cuda
