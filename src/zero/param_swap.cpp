#include "zero/param_swap.h"

#include <algorithm>
#include <chrono>

#include "zero/param_file_backend.h"
#include "zero/param_host_backend.h"

namespace triad::zero {

ParamSwap::ParamSwap(const ParamOffloadConfig& config, const io::AioConfig& aio, Device device) : config_(config) {
  TRIAD_ASSERT(config.device != OffloadDevice::none);
  if (config.device == OffloadDevice::nvme)
    backend_ = std::make_unique<ParamFileBackend>(config, aio);
  else
    backend_ = std::make_unique<ParamHostBackend>(device, config.pin_memory);
}

ParamSwap::~ParamSwap() { slots_.clear(); }  // each transfer waits in its destructor, before the backend goes

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

void ParamSwap::finish_write(Slot& s) {
  if (!s.writing) return;
  give_back(s);  // (a failed write's buffer too: what it held is lost with the error)
  const std::unique_ptr<ParamTransfer> writing = std::move(s.writing);
  writing->finish();
}

void ParamSwap::finish_writes(bool wait_all) {
  for (auto& [_, s] : slots_)
    if (s.writing && (wait_all || s.writing->done())) finish_write(s);
}

void ParamSwap::make_room() {
  finish_writes(/*wait_all=*/false);
  for (auto it = slots_.begin(); it != slots_.end() && resident_ >= config_.buffer_count; ++it)
    finish_write(it->second);
}

void ParamSwap::flush() { finish_writes(/*wait_all=*/true); }

std::unique_ptr<ParamTransfer> ParamSwap::start(Slot& s) {
  ++reads_;
  return backend_->read(s.index);
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
  s.index = backend_->add(group.owned_shard());
  s.bytes = int64_t(group.owned_shard().nbytes());
  slots_.emplace(&group, std::move(s));
  group.set_owned_shard(Tensor());
}

void ParamSwap::start_read(FlatGroup& group) {
  Slot& s = slot(group);
  finish_writes(/*wait_all=*/false);
  if (s.resident || s.reading) return;
  finish_write(s);  // what the slot is to hold first
  if (resident_ >= config_.buffer_count) return;
  s.reading = start(s);
  take_buffer(s);
}

bool ParamSwap::ready(const FlatGroup& group) const {
  const Slot& s = slot(group);
  return s.resident || (s.reading && s.reading->done());
}

void ParamSwap::bring_in(FlatGroup& group, bool bounded) {
  Slot& s = slot(group);
  if (s.resident) return;
  const auto start_time = std::chrono::steady_clock::now();
  Tensor shard;
  if (s.reading) {
    const std::unique_ptr<ParamTransfer> reading = std::move(s.reading);
    try {
      shard = reading->finish();
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
    shard = start(s)->finish();
    take_buffer(s);
  }
  waited_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  TRIAD_ASSERT(shard.numel() == group.shard_size() && shard.dtype() == group.dtype() &&
               shard.device() == group.device());
  group.set_owned_shard(std::move(shard));
  s.resident = true;
  ++arrivals_;
  const bool sized = config_.device == OffloadDevice::nvme;  // fixed buffers (Note [Offloaded parameters])
  TRIAD_ASSERT(!bounded || (resident_ <= config_.buffer_count &&
                            (!sized || resident_bytes_ <= config_.buffer_count * config_.buffer_size *
                                                              int64_t(element_size(group.dtype())))));
}

void ParamSwap::bring_in_to_overwrite(FlatGroup& group) {
  Slot& s = slot(group);
  if (s.resident || s.reading) return bring_in(group);  // (what is coming is as good as nothing)
  finish_write(s);
  make_room();
  take_buffer(s);
  group.set_owned_shard(Tensor::empty({group.shard_size()}, group.dtype(), group.device()));
  s.resident = true;
  ++arrivals_;
  TRIAD_ASSERT(resident_ <= config_.buffer_count);
}

bool ParamSwap::settle(FlatGroup& group) {
  Slot& s = slot(group);
  finish_write(s);
  return !s.resident && !s.reading;
}

void ParamSwap::drop(FlatGroup& group) {
  Slot& s = slot(group);
  if (s.reading) {  // read ahead for nothing (the transfer waits as it goes)
    s.reading.reset();
    give_back(s);
    return;
  }
  if (!s.resident) return;
  group.set_owned_shard(Tensor());
  s.resident = false;
  give_back(s);
}

void ParamSwap::store_from(FlatGroup& group, const Tensor& host) {
  Slot& s = slot(group);
  TRIAD_ASSERT(config_.device == OffloadDevice::nvme && !s.resident && !s.reading && host.device().is_cpu() &&
               host.numel() == group.shard_size() && host.dtype() == group.dtype());
  finish_write(s);
  make_room();
  take_buffer(s);  // the write's block, until it is done
  s.writing = backend_->write(s.index, host);
  ++writes_;
}

void ParamSwap::store(FlatGroup& group) {
  Slot& s = slot(group);
  if (!s.resident) return;
  s.writing = backend_->write(s.index, group.owned_shard());
  ++writes_;
  group.set_owned_shard(Tensor());
  s.resident = false;  // its buffer stays taken until the write is done
}

}  // namespace triad::zero
