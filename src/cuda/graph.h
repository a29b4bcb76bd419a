// CUDA graphs of recorded device work (tensor/device_runtime.h's DeviceGraph): what a
// function enqueues on a device's current stream, captured once (cudaStreamBeginCapture)
// and replayed with one launch, so that a decode step of many small kernels costs the host
// one launch instead of one per kernel (Note [Decode graphs] in engine/generate.h).
//
// Memory allocated during the capture comes from a private pool of the device's caching
// allocator (Note [Graph pools] in caching_allocator.h), kept the graph's until it is
// destroyed; then the pool's segments return to the stream's ordinary cache. The capture is
// thread-local (cudaStreamCaptureModeThreadLocal): other threads' CUDA calls go on, and a
// call of the capturing thread that would make the host wait for the device, which a
// capture cannot hold, fails it: record_graph then throws, having run nothing on the device.
#pragma once

#include <functional>
#include <memory>

#include "tensor/device_runtime.h"

namespace triad::cuda {

// Records what `work` enqueues on cuda:device's current stream; replays enqueue there too.
// Throws Error naming why when the capture fails (nothing of `work`'s device work ran).
std::unique_ptr<DeviceGraph> record_graph(int device, const std::function<void()>& work);

}  // namespace triad::cuda
