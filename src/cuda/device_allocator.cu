// Device memory and events for the caching allocator (device_allocator.h). Events are
// pooled: a free that waits on another stream records one, and creating and destroying
// an event per free would cost more than the free.
#include <array>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/runtime.h"

namespace triad::cuda {

namespace {

class DeviceMemory final : public MemoryProvider {
 public:
  explicit DeviceMemory(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    // A new segment of a graph pool is allocated while this thread captures, whose mode
    // forbids cudaMalloc: relaxed for this call, as PyTorch's allocator does (Note [Graph
    // pools] in caching_allocator.h).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    TRIAD_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t e = cudaMalloc(&p, nbytes);
    TRIAD_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: running out is an answer here, not a failure
      return nullptr;
    }
    TRIAD_CUDA_CHECK(e);
    return p;
  }

  void release(void* ptr, size_t) override {
    DeviceGuard guard(device_);
    TRIAD_CUDA_CHECK(cudaFree(ptr));
  }

  EventId record_event(StreamId stream) override {
    cudaEvent_t e = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_events_.empty()) {
        e = free_events_.back();
        free_events_.pop_back();
      }
    }
    if (!e) {
      DeviceGuard guard(device_);
      TRIAD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    TRIAD_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
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
    std::lock_guard<std::mutex> lock(mutex_);
    free_events_.push_back(reinterpret_cast<cudaEvent_t>(event));
  }

  std::string where() const override { return "cuda:" + std::to_string(device_); }

 private:
  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_events_;
};

std::mutex g_allocators_mutex;
std::array<DeviceAllocator*, kMaxDevices> g_allocators{};

}  // namespace

DeviceAllocator::DeviceAllocator(int device) : device_(device), cache_(std::make_unique<DeviceMemory>(device)) {}

void* DeviceAllocator::allocate(size_t nbytes) { return allocate_on(nbytes, current_stream(device_)); }

void* DeviceAllocator::allocate_on(size_t nbytes, StreamHandle stream) {
  void* p = cache_.allocate(nbytes, reinterpret_cast<StreamId>(stream));
  if (p) count_allocation(nbytes);
  return p;
}

void DeviceAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  cache_.deallocate(ptr);
  count_release(nbytes);
}

DeviceAllocator& device_allocator(int device) {
  const int n = device_count();
  TRIAD_CHECK(device >= 0 && device < n && device < kMaxDevices,
              "cuda:" << device << " requested, but " << (n ? std::to_string(n) : std::string("no")) << " CUDA device"
                      << (n == 1 ? " is" : "s are") << " visible");
  std::lock_guard<std::mutex> lock(g_allocators_mutex);
  DeviceAllocator*& a = g_allocators[device];
  if (!a) a = new DeviceAllocator(device);  // never destroyed (see the header)
  return *a;
}

void record_stream(const Tensor& t, StreamHandle stream) {
  if (!t.defined() || !t.storage() || !t.storage()->data()) return;
  TRIAD_CHECK(t.device().is_cuda(), "record_stream: " << t.str() << " is not on a CUDA device");
  device_allocator(t.device().index).cache().record_stream(t.storage()->data(), reinterpret_cast<StreamId>(stream));
}

MemoryStats memory_stats(int device) { return device_allocator(device).cache().stats(); }
void reset_peak_memory_stats(int device) { device_allocator(device).cache().reset_peak(); }
void empty_cache(int device) { device_allocator(device).cache().empty_cache(); }

}  // namespace triad::cuda
