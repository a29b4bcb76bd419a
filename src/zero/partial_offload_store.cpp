#include "zero/partial_offload_store.h"

#include <utility>

#include "tensor/error.h"

namespace triad::zero {

bool stays_on_device(int64_t end, int64_t total, double ratio) { return double(end) <= (1.0 - ratio) * double(total); }

PartialOffloadStore::PartialOffloadStore(Device device, DType dtype, bool pinned, double ratio, int64_t total)
    : device_(device), host_(device, dtype, pinned), ratio_(ratio), total_(total) {
  TRIAD_ASSERT(ratio >= 0.0 && ratio <= 1.0 && total >= 0);
}

size_t PartialOffloadStore::add(Tensor master, int64_t elements) {
  added_ += elements;
  TRIAD_ASSERT(added_ <= total_);
  // The entries' ends grow, so the ones that stay are the first ones.
  const bool host = !stays_on_device(added_, total_, ratio_);
  places_.push_back({host, host ? host_.add(std::move(master), elements) : device_.add(std::move(master), elements)});
  return places_.size() - 1;
}

ShardStore& PartialOffloadStore::side(size_t entry) {
  if (places_.at(entry).host) return host_;
  return device_;
}

size_t PartialOffloadStore::host_index(size_t entry) const {
  const Place& p = places_.at(entry);
  TRIAD_ASSERT(p.host && "a device entry of a partial offload was handed a host update's input");
  return p.index;
}

void PartialOffloadStore::write_part(size_t entry, ShardPart part, const Tensor& values) {
  side(entry).write_part(places_[entry].index, part, values);
}

void PartialOffloadStore::stage(size_t entry, const Tensor& grad, const Tensor& params) {
  host_.stage(host_index(entry), grad, params);
}

void PartialOffloadStore::keep_params_in(size_t entry, const Tensor& host) {
  host_.keep_params_in(host_index(entry), host);
}

}  // namespace triad::zero
