// The CUDA runtime as the rest of triad sees it. Implemented in runtime.cu when the CUDA
// backend is built, and by stub/runtime.cpp otherwise (which reports no devices and fails
// clearly when a device is required).
#pragma once

#include <string>

namespace triad::cuda {

bool built();        // whether this build has the CUDA backend
int device_count();  // 0 when not built or no GPU is visible
// A line per visible device ("cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90"); throws
// triad::Error when the backend is not built.
std::string describe_devices();

// Registers the caching allocator of every visible device (device_allocator.h) and the
// CUDA backend (cuda_backend.h) with the tensor layer, once per process; later calls
// return at once. The tensor layer calls it the first time a cuda device is asked for, so
// a program never has to. Does nothing in a build without the backend.
void install();

}  // namespace triad::cuda
