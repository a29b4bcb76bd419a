#include "zero/param_file_backend.h"

#include <chrono>
#include <cstring>
#include <future>

#include "io/crc32c.h"
#include "tensor/ops.h"
#include "zero/nvme_swap_file.h"

namespace triad::zero {

namespace {

// A read (the block of the slot's bytes, and what the shard is) or a write in flight.
class FileTransfer final : public ParamTransfer {
 public:
  FileTransfer(std::future<io::AlignedBuffer> reading, int64_t numel, DType dtype, Device device)
      : reading_(std::move(reading)), numel_(numel), dtype_(dtype), device_(device) {}
  explicit FileTransfer(std::future<void> writing) : writing_(std::move(writing)) {}

  bool done() override {
    const auto ready = [](const auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; };
    return reading_.valid() ? ready(reading_) : !writing_.valid() || ready(writing_);
  }
  Tensor finish() override {
    if (!reading_.valid()) {
      if (writing_.valid()) writing_.get();
      return Tensor();
    }
    const io::AlignedBuffer block = reading_.get();
    Tensor host = Tensor::empty({numel_}, dtype_, Device::cpu());
    std::memcpy(host.raw_data(), block.get(), host.nbytes());
    return ops::to(host, device_);
  }

 private:
  std::future<io::AlignedBuffer> reading_;  // (std::async's futures wait in their destructors)
  std::future<void> writing_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
};

}  // namespace

ParamFileBackend::ParamFileBackend(const ParamOffloadConfig& config, const io::AioConfig& aio) {
  file_ = open_nvme_swap_file("zero_optimization.offload_param.nvme_path", config.nvme_path, "params", aio);
}

io::AlignedBuffer ParamFileBackend::block_of(Slot& s, const Tensor& shard) {
  TRIAD_ASSERT(shard.numel() == s.numel && shard.dtype() == s.dtype);
  io::AlignedBuffer block = io::aligned_buffer(io::align_up(s.bytes));
  std::memcpy(block.get(), ops::to(ops::contiguous(shard), Device::cpu()).raw_data(), size_t(s.bytes));
  s.crc = io::crc32c(block.get(), size_t(s.bytes));
  return block;
}

io::AlignedBuffer ParamFileBackend::read_checked(int64_t offset, int64_t bytes, uint32_t expected) {
  const auto start = std::chrono::steady_clock::now();
  io::AlignedBuffer block = io::aligned_buffer(io::align_up(bytes));
  file_->read(offset, block.get(), io::align_up(bytes));
  read_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  const uint32_t crc = io::crc32c(block.get(), size_t(bytes));
  TRIAD_CHECK(crc == expected, "swap file '" << file_->path() << "': a parameter shard of " << bytes
                                             << " bytes at offset " << offset
                                             << " read back differs from what was written (CRC-32C " << crc
                                             << ", expected " << expected << "): the file is damaged");
  return block;
}

size_t ParamFileBackend::add(const Tensor& shard) {
  Slot s{.offset = file_->size(),
         .bytes = int64_t(shard.nbytes()),
         .numel = shard.numel(),
         .dtype = shard.dtype(),
         .device = shard.device()};
  file_->grow(s.offset + io::align_up(s.bytes));
  const io::AlignedBuffer block = block_of(s, shard);
  file_->write(s.offset, block.get(), io::align_up(s.bytes));
  slots_.push_back(s);
  return slots_.size() - 1;
}

std::unique_ptr<ParamTransfer> ParamFileBackend::read(size_t slot) {
  const Slot& s = slots_.at(slot);
  return std::make_unique<FileTransfer>(
      std::async(std::launch::async,
                 [this, offset = s.offset, bytes = s.bytes, crc = s.crc] { return read_checked(offset, bytes, crc); }),
      s.numel, s.dtype, s.device);
}

std::unique_ptr<ParamTransfer> ParamFileBackend::write(size_t slot, const Tensor& shard) {
  Slot& s = slots_.at(slot);
  io::AlignedBuffer block = block_of(s, shard);
  return std::make_unique<FileTransfer>(
      std::async(std::launch::async, [this, offset = s.offset, bytes = s.bytes, block = std::move(block)] {
        file_->write(offset, block.get(), io::align_up(bytes));
      }));
}

}  // namespace triad::zero
