#include "tensor/allocator.h"

#include <cstdlib>
#include <new>

#include "tensor/error.h"

namespace triad {

void Allocator::count_allocation(size_t nbytes) {
  const size_t now = in_use_ += nbytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    if (!p) throw Error("out of host memory allocating " + std::to_string(nbytes) + " bytes");
    count_allocation(nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    std::free(ptr);
    count_release(nbytes);
  }
  Device device() const override { return Device::cpu(); }
};

Allocator* g_cuda_allocator = nullptr;

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  TRIAD_CHECK(g_cuda_allocator != nullptr,
              "device " << device.str() << " requested, but this build of triad has no CUDA backend");
  return *g_cuda_allocator;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  TRIAD_ASSERT(type == DeviceType::cuda);
  g_cuda_allocator = allocator;
}

}  // namespace triad
