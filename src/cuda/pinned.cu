#include <memory>
#include <string>

#include "cuda/check.h"
#include "cuda/pinned.h"

namespace triad::cuda {

namespace {

class PinnedMemory final : public MemoryProvider {
 public:
  void* allocate(size_t nbytes) override {
    void* p = nullptr;
    // Portable: pinned for every device's copies, not only the current one's.
    const cudaError_t e = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    TRIAD_CUDA_CHECK(e);
    return p;
  }

  void release(void* ptr, size_t) override { TRIAD_CUDA_CHECK(cudaFreeHost(ptr)); }

  // An event lives on its stream's device; pinned frees are rare (one per staged copy), so
  // events are made and destroyed as needed.
  EventId record_event(StreamId stream) override {
    const auto s = reinterpret_cast<cudaStream_t>(stream);
    int device = 0;
    TRIAD_CUDA_CHECK(cudaStreamGetDevice(s, &device));
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    TRIAD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    TRIAD_CUDA_CHECK(cudaEventRecord(e, s));
    return reinterpret_cast<EventId>(e);
  }

  bool event_done(EventId event) override {
    const cudaError_t e = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) return false;
    TRIAD_CUDA_CHECK(e);
    return true;
  }

  void wait_event(EventId event) override {
    TRIAD_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
  }

  void release_event(EventId event) override {
    TRIAD_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)));
  }

  std::string where() const override { return "pinned host memory"; }
};

constexpr StreamId kHost = 0;

}  // namespace

PinnedAllocator::PinnedAllocator() : cache_(std::make_unique<PinnedMemory>()) {}

void* PinnedAllocator::allocate(size_t nbytes) {
  void* p = cache_.allocate(nbytes, kHost);
  if (p) count_allocation(nbytes);
  return p;
}

void PinnedAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  cache_.deallocate(ptr);
  count_release(nbytes);
}

PinnedAllocator& pinned_allocator() {
  static PinnedAllocator* a = new PinnedAllocator;  // never destroyed, as the device allocators
  return *a;
}

Tensor pinned_empty(const Shape& shape, DType dtype) {
  auto storage = std::make_shared<Storage>(size_t(numel(shape)) * element_size(dtype), pinned_allocator());
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

void record_pinned_use(void* ptr, StreamHandle stream) {
  if (ptr) pinned_allocator().cache().record_stream(ptr, reinterpret_cast<StreamId>(stream));
}

}  // namespace triad::cuda
