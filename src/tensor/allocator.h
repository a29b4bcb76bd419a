// Allocators own raw bytes for Storage. Each device type has one default allocator; the CPU
// one returns 64-byte-aligned memory (a cache line, and the widest vector load) and counts
// the bytes it holds, so memory reports are exact rather than read off the process's RSS.
//
// Note [Caching CPU allocator]: a training step allocates the same large buffers (logits,
// activations, gradients) every step. Returning them to the C library unmaps them, and
// the next step pays a page fault and a kernel zeroing for every 4 KiB page again. The CPU
// allocator therefore keeps freed blocks of 64 KiB and more in exact-size bins and hands
// them out again; what it keeps is bounded (8 GiB) and released when an allocation fails.
#pragma once

#include <atomic>
#include <cstddef>

#include "tensor/device.h"

namespace triad {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
  // Gives the blocks a caching allocator keeps back to the system (none by default).
  virtual void empty_cache() {}

  size_t bytes_in_use() const { return in_use_.load(); }  // live bytes, not counting caches
  size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }

 protected:
  void count_allocation(size_t nbytes);
  void count_release(size_t nbytes) { in_use_ -= nbytes; }

 private:
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

inline constexpr size_t kCpuAlignment = 64;

Allocator& cpu_allocator();
// The allocator of a device; throws Error when its backend is not built or the device is
// not visible. The first request for a cuda device installs the CUDA backend
// (device_runtime.h).
Allocator& allocator_for(Device device);
// Installs the allocator of one device of a non-CPU type, by its device() (done by that
// device runtime's install, device_runtime.h).
void register_allocator(DeviceType type, Allocator* allocator);

}  // namespace triad
