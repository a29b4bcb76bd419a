#include "tensor/storage.h"

namespace triad {

Storage::Storage(size_t nbytes, Allocator& allocator)
    : data_(allocator.allocate(nbytes)), nbytes_(nbytes), device_(allocator.device()), allocator_(&allocator) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (allocator_)
    allocator_->deallocate(data_, nbytes_);
  else if (release_)
    release_(data_);
}

}  // namespace triad
