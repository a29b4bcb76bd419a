#include "rlhf/ema_swap_storage.h"

#include <algorithm>

#include "io/crc32c.h"
#include "tensor/ops.h"
#include "tensor/storage.h"
#include "zero/nvme_swap_file.h"

namespace triad::rlhf {

EmaSwapStorage::EmaSwapStorage(const std::string& key, const std::string& folder, const io::AioConfig& aio)
    : file_(zero::open_nvme_swap_file(key, folder, "ema", aio)) {}

EmaSwapStorage::~EmaSwapStorage() {
  // Their errors, if any, go with the storage.
  if (reading_.valid()) reading_.wait();
  if (writing_.valid()) writing_.wait();
}

Tensor EmaSwapStorage::Batch::new_record() const {
  return zero::aligned_host(std::max<int64_t>(record_bytes(), io::kSwapAlignment));
}

std::vector<EmaStorage::Slice> EmaSwapStorage::slices_of(const Batch& b, const Tensor& record) const {
  std::vector<Slice> out;
  int64_t at = 0;
  for (size_t i = 0; i < b.layout.size(); ++i) {
    const Slice& s = b.layout[i];
    out.push_back({s.name, s.shape, s.first, ops::narrow(record, 0, at, b.counts[i])});
    at += b.counts[i];
  }
  return out;
}

void EmaSwapStorage::add(const std::vector<Slice>& initial) {
  Batch b;
  b.offset = file_->size();
  for (const Slice& s : initial) {
    TRIAD_ASSERT(s.values.dtype() == DType::f32 && s.values.dim() == 1);
    b.layout.push_back({s.name, s.shape, s.first, Tensor()});
    b.counts.push_back(s.values.numel());
    b.elements += s.values.numel();
  }
  file_->grow(b.offset + b.record_bytes());
  batches_.push_back(b);
  const Tensor record = b.new_record();
  ops::zero_(record);
  const std::vector<Slice> values = slices_of(b, record);
  for (size_t i = 0; i < values.size(); ++i) ops::copy_(values[i].values, ops::to(initial[i].values, Device::cpu()));
  write_record(batches_.size() - 1, record);
  finish_write();  // before the file grows for the next batch
}

Tensor EmaSwapStorage::read_record(size_t k) const {
  const Batch& b = batches_[k];
  const Tensor record = b.new_record();
  file_->read(b.offset, record.raw_data(), b.record_bytes());
  const uint32_t crc = io::crc32c(record.raw_data(), size_t(b.elements) * 4);
  TRIAD_CHECK(crc == b.crc, "swap file '" << file_->path() << "': the average of batch " << k
                                          << " read back differs from what was written (CRC-32C " << crc
                                          << ", expected " << b.crc << "): the file is damaged");
  return record;
}

void EmaSwapStorage::write_record(size_t k, const Tensor& record) {
  finish_write();
  Batch& b = batches_[k];
  b.crc = io::crc32c(record.raw_data(), size_t(b.elements) * 4);
  writing_batch_ = k;
  writing_ = std::async(std::launch::async, [this, record, offset = b.offset, bytes = b.record_bytes()] {
    file_->write(offset, record.raw_data(), bytes);
  });
}

void EmaSwapStorage::finish_write() {
  if (!writing_.valid()) return;
  std::future<void> done = std::move(writing_);
  done.get();
}

void EmaSwapStorage::finish() { finish_write(); }

void EmaSwapStorage::drop_read_ahead() {
  if (reading_.valid()) reading_.wait();  // what it read (or its error) is not wanted
  reading_ = {};
}

void EmaSwapStorage::prefetch(size_t k) {
  TRIAD_ASSERT(k < batches_.size());
  if (reading_.valid() && ahead_ == k) return;
  drop_read_ahead();
  if (writing_.valid() && writing_batch_ == k) finish_write();
  ahead_ = k;
  reading_ = std::async(std::launch::async, [this, k] { return read_record(k); });
}

std::vector<EmaStorage::Slice> EmaSwapStorage::read(size_t k, bool current) {
  TRIAD_ASSERT(k < batches_.size());
  const Batch& b = batches_[k];
  if (writing_.valid() && writing_batch_ == k) finish_write();
  Tensor record;
  if (current && reading_.valid() && ahead_ == k) {
    std::future<Tensor> done = std::move(reading_);
    record = done.get();
  } else {
    drop_read_ahead();
    if (current) {
      record = read_record(k);
    } else {
      record = b.new_record();
      ops::zero_(ops::narrow(record, 0, b.elements, record.numel() - b.elements));  // the padding
    }
  }
  return slices_of(b, record);
}

void EmaSwapStorage::write(size_t k, const std::vector<Slice>& values) {
  TRIAD_ASSERT(k < batches_.size() && values.size() == batches_[k].layout.size());
  if (values.empty()) return;
  // The slices are views of the record read() handed out, from its first element on.
  const Tensor& first = values.front().values;
  TRIAD_ASSERT(first.offset() == 0 && int64_t(first.storage()->nbytes()) >= batches_[k].record_bytes());
  write_record(k, Tensor::from_storage(first.storage(), {batches_[k].record_bytes() / 4}, {1}, 0, DType::f32));
}

}  // namespace triad::rlhf
