#include "tensor/allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/device_runtime.h"
#include "tensor/error.h"

namespace triad {

void Allocator::count_allocation(size_t nbytes) {
  const size_t now = in_use_ += nbytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

namespace {

void* aligned_block(size_t nbytes) {
  const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  void* p = std::aligned_alloc(kCpuAlignment, rounded);
  if (!p) throw Error("out of host memory allocating " + std::to_string(nbytes) + " bytes");
  return p;
}

// Note [Caching CPU allocator].
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kMinCached = size_t(64) << 10;

  ~CpuAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    count_allocation(nbytes);
    if (nbytes >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = bins_.find(nbytes);
      if (it != bins_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= nbytes;
        return p;
      }
    }
    try {
      return aligned_block(nbytes);
    } catch (...) {
      count_release(nbytes);
      empty_cache();
      count_allocation(nbytes);
      return aligned_block(nbytes);
    }
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    count_release(nbytes);
    if (nbytes >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + nbytes <= kLimit) {
        bins_[nbytes].push_back(ptr);
        cached_ += nbytes;
        return;
      }
    }
    std::free(ptr);
  }

  Device device() const override { return Device::cpu(); }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [_, blocks] : bins_)
      for (void* p : blocks) std::free(p);
    bins_.clear();
    cached_ = 0;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> bins_;
  size_t cached_ = 0;
  static constexpr size_t kLimit = size_t(8) << 30;  // bytes kept at most
};

CpuAllocator& the_cpu_allocator() {
  static CpuAllocator a;
  return a;
}

std::vector<Allocator*> g_cuda_allocators;  // by device index

}  // namespace

Allocator& cpu_allocator() { return the_cpu_allocator(); }

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  device_runtime(device);  // installs the CUDA allocators on first use
  const int n = int(g_cuda_allocators.size());
  TRIAD_CHECK(device.index >= 0 && device.index < n && g_cuda_allocators[device.index] != nullptr,
              "device " << device.str() << " requested, but "
                        << (n == 0 ? "no CUDA device is visible" : std::to_string(n) + " CUDA device(s) are visible"));
  return *g_cuda_allocators[device.index];
}

void register_allocator(DeviceType type, Allocator* allocator) {
  TRIAD_ASSERT(type == DeviceType::cuda && allocator->device().is_cuda());
  const size_t index = size_t(allocator->device().index);
  if (g_cuda_allocators.size() <= index) g_cuda_allocators.resize(index + 1, nullptr);
  g_cuda_allocators[index] = allocator;
}

}  // namespace triad
