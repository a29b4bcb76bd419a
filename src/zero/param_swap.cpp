#include "zero/param_swap.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "io/crc32c.h"
#include "tensor/ops.h"
#include "zero/nvme_swap_file.h"

namespace triad::zero {

ParamSwap::ParamSwap(const ParamOffloadConfig& config, const io::AioConfig& aio) : config_(config) {
  file_ = open_nvme_swap_file("zero_optimization.offload_param.nvme_path", config.nvme_path, "params", aio);
}

ParamSwap::~ParamSwap() {
  for (auto& [_, s] : slots_) {
    if (s.reading.valid()) s.reading.wait();  // a read nobody needs: its error goes with it
    if (s.writing.valid()) s.writing.wait();  // the file goes with the swap
  }
}

ParamSwap::Slot& ParamSwap::slot(const FlatGroup& group) {
  const auto it = slots_.find(&group);
  TRIAD_ASSERT(it != slots_.end());
  return it->second;
}

const ParamSwap::Slot& ParamSwap::slot(const FlatGroup& group) const {
  const auto it = slots_.find(&group);
  TRIAD_ASSERT(it != slots_.end());
  return it->second;
}

io::AlignedBuffer ParamSwap::block_of(const Slot& s, const Tensor& shard) {
  io::AlignedBuffer block = io::aligned_buffer(io::align_up(s.bytes));
  std::memcpy(block.get(), ops::to(ops::contiguous(shard), Device::cpu()).raw_data(), size_t(s.bytes));
  return block;
}

void ParamSwap::finish_write(Slot& s) {
  if (!s.writing.valid()) return;
  give_back(s);  // (a failed write's buffer too: what it held is lost with the error)
  s.writing.get();
}

void ParamSwap::finish_writes(bool wait_all) {
  for (auto& [_, s] : slots_)
    if (s.writing.valid() &&
        (wait_all || s.writing.wait_for(std::chrono::seconds(0)) == std::future_status::ready))
      finish_write(s);
}

void ParamSwap::make_room() {
  finish_writes(/*wait_all=*/false);
  for (auto it = slots_.begin(); it != slots_.end() && resident_ >= config_.buffer_count; ++it)
    finish_write(it->second);
}

void ParamSwap::flush() { finish_writes(/*wait_all=*/true); }

io::AlignedBuffer ParamSwap::read_checked(int64_t offset, int64_t bytes, uint32_t expected) {
  const auto start = std::chrono::steady_clock::now();
  io::AlignedBuffer block = io::aligned_buffer(io::align_up(bytes));
  file_->read(offset, block.get(), io::align_up(bytes));
  ++reads_;
  read_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  const uint32_t crc = io::crc32c(block.get(), size_t(bytes));
  TRIAD_CHECK(crc == expected, "swap file '" << file_->path() << "': a parameter shard of " << bytes
                                             << " bytes at offset " << offset
                                             << " read back differs from what was written (CRC-32C " << crc
                                             << ", expected " << expected << "): the file is damaged");
  return block;
}

void ParamSwap::take_buffer(const Slot& s) {
  ++resident_;
  resident_bytes_ += s.bytes;
  peak_bytes_ = std::max(peak_bytes_, resident_bytes_);
}

void ParamSwap::give_back(const Slot& s) {
  --resident_;
  resident_bytes_ -= s.bytes;
}

void ParamSwap::add(FlatGroup& group) {
  TRIAD_ASSERT(group.partitioned() && group.owned_shard().defined() && !slots_.count(&group));
  Slot s;
  s.offset = file_->size();
  s.bytes = int64_t(group.owned_shard().nbytes());
  file_->grow(s.offset + io::align_up(s.bytes));
  const io::AlignedBuffer block = block_of(s, group.owned_shard());
  s.crc = io::crc32c(block.get(), size_t(s.bytes));
  file_->write(s.offset, block.get(), io::align_up(s.bytes));
  slots_.emplace(&group, std::move(s));
  group.set_owned_shard(Tensor());
}

void ParamSwap::start_read(FlatGroup& group) {
  Slot& s = slot(group);
  finish_writes(/*wait_all=*/false);
  if (s.resident || s.reading.valid()) return;
  finish_write(s);  // what the file is to hold first
  if (resident_ >= config_.buffer_count) return;
  take_buffer(s);
  s.reading = std::async(std::launch::async, [this, offset = s.offset, bytes = s.bytes, crc = s.crc] {
    return read_checked(offset, bytes, crc);
  });
}

bool ParamSwap::ready(const FlatGroup& group) const {
  const Slot& s = slot(group);
  return s.resident || (s.reading.valid() && s.reading.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
}

void ParamSwap::bring_in(FlatGroup& group, bool bounded) {
  Slot& s = slot(group);
  if (s.resident) return;
  const auto start = std::chrono::steady_clock::now();
  io::AlignedBuffer block;
  if (s.reading.valid()) {
    try {
      block = s.reading.get();
    } catch (...) {
      give_back(s);
      throw;
    }
  } else {
    finish_write(s);
    if (bounded)
      make_room();
    else  // a checkpoint's view: the shards of one batch in memory at a time, those of the last written first
      finish_writes(/*wait_all=*/true);
    block = read_checked(s.offset, s.bytes, s.crc);
    take_buffer(s);
  }
  waited_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Tensor host = Tensor::empty({group.shard_size()}, group.dtype(), Device::cpu());
  std::memcpy(host.raw_data(), block.get(), size_t(s.bytes));
  group.set_owned_shard(ops::to(host, group.device()));
  s.resident = true;
  TRIAD_ASSERT(!bounded ||
               (resident_ <= config_.buffer_count &&
                resident_bytes_ <= config_.buffer_count * config_.buffer_size * int64_t(element_size(group.dtype()))));
}

void ParamSwap::drop(FlatGroup& group) {
  Slot& s = slot(group);
  if (s.reading.valid()) {  // read ahead for nothing
    s.reading.wait();
    s.reading = {};
    give_back(s);
    return;
  }
  if (!s.resident) return;
  group.set_owned_shard(Tensor());
  s.resident = false;
  give_back(s);
}

void ParamSwap::store(FlatGroup& group) {
  Slot& s = slot(group);
  if (!s.resident) return;
  io::AlignedBuffer block = block_of(s, group.owned_shard());
  s.crc = io::crc32c(block.get(), size_t(s.bytes));
  group.set_owned_shard(Tensor());
  s.resident = false;  // its buffer stays taken until the write is done
  s.writing = std::async(std::launch::async, [this, offset = s.offset, bytes = s.bytes, block = std::move(block)] {
    file_->write(offset, block.get(), io::align_up(bytes));
  });
}

}  // namespace triad::zero
