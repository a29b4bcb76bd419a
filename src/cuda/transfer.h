// Copies between host and device memory: what ops::to(t, device) does when t crosses
// between the host and a CUDA device. Staged through pinned buffers (pinned.h) in chunks so
// that the host's memcpy of one chunk overlaps the DMA of the next:
// - to the device, the host returns once the last chunk is queued (the copy completes in
//   order on the device's current stream, before any later work on it);
// - to the host, the host waits for the data, as it must to read it.
// Built with the CUDA backend only: without it no tensor lives on a device, and
// tensor/device_runtime.h says so.
#pragma once

#include "tensor/tensor.h"

namespace triad::cuda {

// src (cpu, any layout) into dst (cuda, contiguous, same shape and dtype).
void copy_to_device(const Tensor& dst, const Tensor& src);
// src (cuda, any layout) into dst (cpu, contiguous, same shape and dtype).
void copy_to_host(const Tensor& dst, const Tensor& src);

// A contiguous copy of t on `device` (t itself when it is already there, as ops::to).
Tensor to_device(const Tensor& t, Device device);
// A contiguous copy of t on the host (t itself when it is already there).
Tensor to_host(const Tensor& t);

}  // namespace triad::cuda
