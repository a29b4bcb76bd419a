// Pinned (page-locked) host memory for staging copies between host and device. Copies
// from pageable memory make the driver stage them itself and block the host; from pinned
// memory they are plain DMA that runs asynchronously on a stream.
//
// The allocator is the caching one (Note [Stream-ordered caching allocator]) over
// cudaHostAlloc: every block belongs to the host (stream 0), and a block read or written
// by an asynchronous copy must be declared with record_pinned_use(); once freed it is not
// handed out again until that copy is done, so the host never overwrites bytes a copy
// still reads. Its device is the CPU: a Tensor over it is an ordinary CPU tensor.
#pragma once

#include "cuda/caching_allocator.h"
#include "cuda/stream.h"
#include "tensor/allocator.h"
#include "tensor/tensor.h"

namespace triad::cuda {

class PinnedAllocator final : public Allocator {
 public:
  PinnedAllocator();
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  Device device() const override { return Device::cpu(); }
  CachingAllocator& cache() { return cache_; }

 private:
  CachingAllocator cache_;
};

// The process's pinned allocator (created on first use, never destroyed).
PinnedAllocator& pinned_allocator();

// A contiguous CPU tensor in pinned memory.
Tensor pinned_empty(const Shape& shape, DType dtype);

// The pinned block at ptr (from pinned_allocator) is used by work queued on `stream`.
void record_pinned_use(void* ptr, StreamHandle stream);

}  // namespace triad::cuda
