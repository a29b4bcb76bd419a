#include "zero/param_swap.h"

#include <algorithm>
#include <cstring>

#include "io/crc32c.h"
#include "tensor/ops.h"
#include "zero/nvme_swap_file.h"

namespace triad::zero {

ParamSwap::ParamSwap(const ParamOffloadConfig& config, const io::AioConfig& aio) : config_(config) {
  file_ = open_nvme_swap_file("zero_optimization.offload_param.nvme_path", config.nvme_path, "params", aio);
}

ParamSwap::Slot& ParamSwap::slot(const FlatGroup& group) {
  const auto it = slots_.find(&group);
  TRIAD_ASSERT(it != slots_.end());
  return it->second;
}

void ParamSwap::write(const Slot& s, const Tensor& shard) {
  const io::AlignedBuffer block = io::aligned_buffer(io::align_up(s.bytes));
  std::memcpy(block.get(), ops::to(shard, Device::cpu()).raw_data(), size_t(s.bytes));
  file_->write(s.offset, block.get(), io::align_up(s.bytes));
}

void ParamSwap::add(FlatGroup& group) {
  TRIAD_ASSERT(group.partitioned() && group.owned_shard().defined() && !slots_.count(&group));
  Slot s{.offset = file_->size(), .bytes = int64_t(group.owned_shard().nbytes())};
  file_->grow(s.offset + io::align_up(s.bytes));
  const Tensor shard = ops::contiguous(group.owned_shard());
  s.crc = io::crc32c(ops::to(shard, Device::cpu()).raw_data(), size_t(s.bytes));
  write(s, shard);
  slots_.emplace(&group, s);
  group.set_owned_shard(Tensor());
}

void ParamSwap::bring_in(FlatGroup& group, bool bounded) {
  Slot& s = slot(group);
  if (s.resident) return;
  const io::AlignedBuffer block = io::aligned_buffer(io::align_up(s.bytes));
  file_->read(s.offset, block.get(), io::align_up(s.bytes));
  const uint32_t crc = io::crc32c(block.get(), size_t(s.bytes));
  TRIAD_CHECK(crc == s.crc, "swap file '" << file_->path() << "': a parameter shard of " << s.bytes << " bytes at offset "
                                          << s.offset << " read back differs from what was written (CRC-32C " << crc
                                          << ", expected " << s.crc << "): the file is damaged");
  Tensor host = Tensor::empty({group.shard_size()}, group.dtype(), Device::cpu());
  std::memcpy(host.raw_data(), block.get(), size_t(s.bytes));
  group.set_owned_shard(ops::to(host, group.device()));
  s.resident = true;
  ++resident_;
  resident_bytes_ += s.bytes;
  peak_bytes_ = std::max(peak_bytes_, resident_bytes_);
  TRIAD_ASSERT(!bounded ||
               (resident_ <= config_.buffer_count &&
                resident_bytes_ <= config_.buffer_count * config_.buffer_size * int64_t(element_size(group.dtype()))));
}

void ParamSwap::drop(FlatGroup& group) {
  Slot& s = slot(group);
  if (!s.resident) return;
  group.set_owned_shard(Tensor());
  s.resident = false;
  --resident_;
  resident_bytes_ -= s.bytes;
}

void ParamSwap::store(FlatGroup& group) {
  Slot& s = slot(group);
  if (!s.resident) return;
  const Tensor shard = ops::contiguous(ops::to(group.owned_shard(), Device::cpu()));
  s.crc = io::crc32c(shard.raw_data(), size_t(s.bytes));
  write(s, shard);
  drop(group);
}

}  // namespace triad::zero
