// Storage: one block of bytes on one device, owned through its allocator (or borrowed from
// elsewhere, e.g. a memory-mapped file, with a deleter). Tensors share a Storage through
// shared_ptr; views are tensors over the same Storage with other shape/strides/offset.
#pragma once

#include <functional>
#include <memory>

#include "tensor/allocator.h"

namespace triad {

class Storage {
 public:
  Storage(size_t nbytes, Allocator& allocator);
  // Borrowed bytes: `release` runs when the last tensor over them goes away.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> release_;
};

}  // namespace triad
