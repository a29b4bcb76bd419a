// The tensor Allocator of a CUDA device: Note [Stream-ordered caching allocator] over
// cudaMalloc/cudaFree and CUDA events. A tensor's memory is allocated for the calling
// thread's current stream on its device (Note [Streams]); Storage frees it on the host
// as soon as the last tensor over it goes, which is safe because only later work on the
// same stream can receive it again.
//
// One allocator per visible device, created by cuda::runtime()'s install and never destroyed (it
// would otherwise call cudaFree from a static destructor, after the runtime may be gone;
// the process's exit returns the memory).
#pragma once

#include "cuda/caching_allocator.h"
#include "cuda/runtime.h"
#include "cuda/stream.h"
#include "tensor/allocator.h"
#include "tensor/tensor.h"

namespace triad::cuda {

class DeviceAllocator final : public Allocator {
 public:
  explicit DeviceAllocator(int device);

  void* allocate(size_t nbytes) override;  // for current_stream(device)
  void deallocate(void* ptr, size_t nbytes) override;
  Device device() const override { return Device::cuda(device_); }

  // For work on a given stream (a communication stream's scratch buffer, a GEMM workspace).
  void* allocate_on(size_t nbytes, StreamHandle stream);
  CachingAllocator& cache() { return cache_; }

 private:
  int device_;
  CachingAllocator cache_;
};

// The allocator of cuda:device; throws Error when no such device is visible.
DeviceAllocator& device_allocator(int device);

// t's memory is also used by work on `stream` (not the stream it was allocated for): the
// allocator will not hand it out again until that work is done. Communicators and side
// streams call it for every tensor they touch.
void record_stream(const Tensor& t, StreamHandle stream);

// memory_stats and reset_peak_memory_stats of this allocator: cuda/runtime.h.
// Returns the cached segments of the device's allocator to the driver (after the events of
// pending frees complete). For tests, and before handing memory to another library.
void empty_cache(int device);

}  // namespace triad::cuda
