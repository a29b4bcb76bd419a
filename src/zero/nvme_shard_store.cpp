#include "zero/nvme_shard_store.h"

#include <algorithm>

#include "io/crc32c.h"
#include "tensor/ops.h"
#include "zero/nvme_swap_file.h"

namespace triad::zero {

namespace {

const char* part_name(ShardPart part) {
  return part == ShardPart::master ? "master weights" : part == ShardPart::exp_avg ? "exp_avg" : "exp_avg_sq";
}

}  // namespace

NvmeShardStore::NvmeShardStore(Device device, const OffloadConfig& config, const io::AioConfig& aio, bool gradients)
    : device_(device), config_(config), gradients_(gradients) {
  file_ = open_nvme_swap_file("zero_optimization.offload_optimizer.nvme_path", config.nvme_path, "optimizer", aio);
}

NvmeShardStore::~NvmeShardStore() {
  for (const std::unique_ptr<Buffer>& b : buffers_)
    if (b->io.valid()) b->io.wait();  // its error, if any, is lost with the state
  for (GradBuffer& g : grad_buffers_)
    if (g.io.valid()) g.io.wait();
}

size_t NvmeShardStore::add(Tensor master, int64_t elements) {
  TRIAD_ASSERT(!sealed_ && (!master.defined() || (master.numel() == elements && master.dtype() == DType::f32)));
  Entry e{.elements = elements, .offset = file_->size(), .parts = master.defined() ? 3 : 2};
  file_->grow(e.offset + e.record_bytes() + (gradients_ ? e.part_bytes() : 0));
  const Tensor record = aligned_host(e.record_bytes());
  ops::zero_(record);
  if (master.defined()) ops::copy_(part_view(record, e, 0), ops::to(master, Device::cpu()));
  for (int i = 0; i < e.parts; ++i) e.crc[size_t(i)] = io::crc32c(part_view(record, e, i).raw_data(), size_t(elements) * 4);
  file_->write(e.offset, record.raw_data(), e.record_bytes());
  record_bytes_ = std::max(record_bytes_, e.record_bytes());
  part_bytes_ = std::max(part_bytes_, e.part_bytes());
  entries_.push_back(e);
  return entries_.size() - 1;
}

Tensor NvmeShardStore::part_view(const Tensor& record, const Entry& e, int index) const {
  return ops::narrow(record, 0, index * e.part_bytes() / 4, e.elements);
}

void NvmeShardStore::check(const float* data, size_t entry, ShardPart part) const {
  const Entry& e = entries_[entry];
  const uint32_t crc = io::crc32c(data, size_t(e.elements) * 4), expected = e.crc[size_t(e.index(part))];
  TRIAD_CHECK(crc == expected, "swap file '" << file_->path() << "': the " << part_name(part) << " of sub-group "
                                             << entry << " read back differ from what was written (CRC-32C " << crc
                                             << ", expected " << expected << "): the file is damaged");
}

void NvmeShardStore::read_gradient(const Entry& e, size_t entry, bool has, uint32_t crc, const Tensor& out) const {
  if (!has) return ops::zero_(out);
  file_->read(e.offset + e.record_bytes(), out.raw_data(), e.part_bytes());
  const uint32_t got = io::crc32c(out.raw_data(), size_t(e.elements) * 4);
  TRIAD_CHECK(got == crc, "swap file '" << file_->path() << "': the gradient of sub-group " << entry
                                        << " read back differs from what was written (CRC-32C " << got
                                        << ", expected " << crc << "): the file is damaged");
}

void NvmeShardStore::finish(GradBuffer& g) {
  if (!g.io.valid()) return;
  try {
    g.io.get();
  } catch (...) {
    g.entry = -1;
    throw;
  }
}

NvmeShardStore::GradBuffer* NvmeShardStore::gradient_holding(size_t entry) {
  for (GradBuffer& g : grad_buffers_)
    if (g.entry == int64_t(entry)) return &g;
  return nullptr;
}

Tensor NvmeShardStore::accumulate_gradient(size_t entry, const Tensor& values) {
  TRIAD_ASSERT(gradients_ && held_ < 0 && values.numel() == entries_.at(entry).elements);
  sealed_ = true;
  Entry& e = entries_[entry];
  if (Buffer* b = holding(entry); b && b->stage == Stage::reading) finish(*b);  // it may be reading the gradient
  GradBuffer* g = gradient_holding(entry);  // the sum so far, from its last write
  if (g) {
    finish(*g);
  } else {
    g = &grad_buffers_[next_grad_buffer_];
    next_grad_buffer_ = (next_grad_buffer_ + 1) % grad_buffers_.size();
    finish(*g);
    g->entry = -1;
    if (!g->host.defined()) g->host = aligned_host(part_bytes_);
    read_gradient(e, entry, e.has_grad, e.grad_crc, ops::narrow(g->host, 0, 0, e.elements));
  }
  const Tensor sum = ops::narrow(g->host, 0, 0, e.elements);
  const Tensor added = ops::to(values, Device::cpu());
  if (added.dtype() == DType::f32) {
    ops::add_(sum, added);
  } else {  // rounded to the training dtype, as the in-memory shard is (the f32 sum holds such values exactly)
    const Tensor narrow_sum = ops::to(sum, added.dtype());
    ops::add_(narrow_sum, added);
    ops::copy_(sum, narrow_sum);
  }
  g->entry = int64_t(entry);
  e.has_grad = true;
  ++e.grad_version;
  e.grad_crc = io::crc32c(sum.raw_data(), size_t(e.elements) * 4);
  g->io = std::async(std::launch::async, [this, g, offset = e.offset + e.record_bytes(), bytes = e.part_bytes()] {
    file_->write(offset, g->host.raw_data(), bytes);
  });
  if (!config_.pipeline_write) finish(*g);
  return sum;
}

void NvmeShardStore::clear_gradients() {
  for (Entry& e : entries_) {
    e.has_grad = false;
    ++e.grad_version;
  }
  for (GradBuffer& g : grad_buffers_) g.entry = -1;  // (its write, if any, is waited for before the buffer is reused)
}

NvmeShardStore::Buffer* NvmeShardStore::holding(size_t entry) {
  for (const std::unique_ptr<Buffer>& b : buffers_)
    if (b->entry == int64_t(entry)) return b.get();
  return nullptr;
}

NvmeShardStore::Buffer* NvmeShardStore::free_buffer(bool wait) {
  if (int64_t(buffers_.size()) < config_.buffer_count) {
    buffers_.push_back(std::make_unique<Buffer>());
    buffers_.back()->host = aligned_host(record_bytes_);
    if (gradients_) buffers_.back()->grad = aligned_host(part_bytes_);
    return buffers_.back().get();
  }
  Buffer* oldest = nullptr;
  for (const std::unique_ptr<Buffer>& b : buffers_) {
    const bool takeable = b->stage == Stage::idle || b->stage == Stage::writing || (wait && b->stage == Stage::reading);
    if (takeable && (!oldest || b->used < oldest->used)) oldest = b.get();
  }
  if (oldest) {
    finish(*oldest);
    oldest->entry = -1;
  }
  return oldest;
}

void NvmeShardStore::finish(Buffer& b) {
  if (!b.io.valid()) return;
  try {
    b.io.get();
  } catch (...) {
    b.entry = -1;  // what it holds is not the entry's state
    b.stage = Stage::idle;
    throw;
  }
  b.stage = Stage::idle;
}

void NvmeShardStore::finish_all() {
  for (const std::unique_ptr<Buffer>& b : buffers_) finish(*b);
}

void NvmeShardStore::start_read(Buffer& b, size_t entry) {
  b.entry = int64_t(entry);
  b.stage = Stage::reading;
  b.used = ++clock_;
  const Entry& now = entries_[entry];
  if (gradients_) {  // with its gradient as it is now (its write done first)
    if (GradBuffer* g = gradient_holding(entry)) finish(*g);
    b.grad_version = now.grad_version;
  }
  b.io = std::async(std::launch::async, [this, &b, entry, has = now.has_grad, crc = now.grad_crc] {
    const Entry& e = entries_[entry];
    file_->read(e.offset, b.host.raw_data(), e.record_bytes());
    for (ShardPart p : {ShardPart::master, ShardPart::exp_avg, ShardPart::exp_avg_sq})
      if (p != ShardPart::master || e.parts == 3) check(part_view(b.host, e, e.index(p)).data<float>(), entry, p);
    if (gradients_) read_gradient(e, entry, has, crc, ops::narrow(b.grad, 0, 0, e.elements));
  });
}

void NvmeShardStore::start_write(Buffer& b) {
  b.stage = Stage::writing;
  b.io = std::async(std::launch::async, [this, &b] {
    Entry& e = entries_[size_t(b.entry)];
    // The checksums are taken on this thread too: nothing else touches the buffer until the
    // write is done, and the entry's checksums are read only after it (finish()).
    for (int i = 0; i < e.parts; ++i)
      e.crc[size_t(i)] = io::crc32c(part_view(b.host, e, i).raw_data(), size_t(e.elements) * 4);
    file_->write(e.offset, b.host.raw_data(), e.record_bytes());
  });
}

const ShardState& NvmeShardStore::acquire(size_t entry) {
  TRIAD_ASSERT(held_ < 0 && entry < entries_.size());
  sealed_ = true;
  Buffer* b = holding(entry);
  if (!b) {
    b = free_buffer(/*wait=*/true);
    TRIAD_ASSERT(b != nullptr);
    start_read(*b, entry);
  }
  finish(*b);
  b->stage = Stage::held;
  b->used = ++clock_;
  held_ = int64_t(entry);
  const Entry& e = entries_[entry];
  Tensor parts[3];
  for (int i = 0; i < e.parts; ++i) parts[i] = ops::to(part_view(b->host, e, i), device_);  // the view itself on the cpu
  b->state = e.parts == 3 ? ShardState{parts[0], parts[1], parts[2], Tensor(), Tensor()}
                          : ShardState{Tensor(), parts[0], parts[1], Tensor(), Tensor()};
  if (gradients_) {
    const Tensor grad = ops::narrow(b->grad, 0, 0, e.elements);
    if (b->grad_version != e.grad_version) {  // it changed since this buffer's read started
      if (GradBuffer* g = gradient_holding(entry)) finish(*g);
      read_gradient(e, entry, e.has_grad, e.grad_crc, grad);
      b->grad_version = e.grad_version;
    }
    b->state.grad = ops::to(grad, device_);
  }
  return b->state;
}

void NvmeShardStore::release(size_t entry, bool dirty) {
  TRIAD_ASSERT(held_ == int64_t(entry));
  held_ = -1;
  Buffer& b = *holding(entry);
  const Entry& e = entries_[entry];
  if (dirty && !device_.is_cpu()) {
    const Tensor* parts[] = {&b.state.master, &b.state.exp_avg, &b.state.exp_avg_sq};
    for (int i = 0; i < e.parts; ++i)
      ops::copy_(part_view(b.host, e, i), ops::to(*parts[i + 3 - e.parts], Device::cpu()));
  }
  b.state = {};
  b.stage = Stage::idle;
  if (!dirty) return;
  start_write(b);
  if (!config_.pipeline_write) finish(b);
}

void NvmeShardStore::prefetch(size_t entry) {
  if (!config_.pipeline_read || holding(entry)) return;
  sealed_ = true;
  if (Buffer* b = free_buffer(/*wait=*/false)) start_read(*b, entry);
}

Tensor NvmeShardStore::read_part(size_t entry, ShardPart part) {
  TRIAD_ASSERT(held_ < 0);
  sealed_ = true;
  finish_all();  // the file holds every write-back
  const Entry& e = entries_.at(entry);
  const int index = e.index(part);
  TRIAD_ASSERT(part != ShardPart::master || e.parts == 3);
  const Tensor block = aligned_host(e.part_bytes());
  file_->read(e.offset + index * e.part_bytes(), block.raw_data(), e.part_bytes());
  check(block.data<float>(), entry, part);
  return ops::narrow(block, 0, 0, e.elements);
}

void NvmeShardStore::write_part(size_t entry, ShardPart part, const Tensor& values) {
  TRIAD_ASSERT(held_ < 0 && values.numel() == entries_.at(entry).elements);
  sealed_ = true;
  finish_all();
  if (Buffer* b = holding(entry)) b->entry = -1;  // its copy is stale now
  Entry& e = entries_[entry];
  const int index = e.index(part);
  const Tensor block = aligned_host(e.part_bytes());
  ops::copy_(ops::narrow(block, 0, 0, e.elements), ops::to(values, Device::cpu()));
  e.crc[size_t(index)] = io::crc32c(block.raw_data(), size_t(e.elements) * 4);
  file_->write(e.offset + index * e.part_bytes(), block.raw_data(), e.part_bytes());
}

int64_t NvmeShardStore::device_bytes() const {
  const int64_t grad = gradients_ ? part_bytes_ : 0;
  return device_.is_cpu() ? host_buffer_bytes() : record_bytes_ + grad;
}

int64_t NvmeShardStore::host_bytes() const { return device_.is_cpu() ? 0 : host_buffer_bytes(); }

int64_t NvmeShardStore::host_buffer_bytes() const {
  const int64_t records = std::min<int64_t>(config_.buffer_count, int64_t(entries_.size()));
  return records * record_bytes_ + (gradients_ ? (records + int64_t(grad_buffers_.size())) * part_bytes_ : 0);
}

}  // namespace triad::zero
