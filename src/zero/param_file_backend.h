// ZeRO-Infinity's parameter shards in a swap file (offload_param.device "nvme";
// zero/param_backend.h): each slot holds one shard's bytes padded to 4096, the CRC-32C of
// what was last written kept in memory and every read checked against it. Reads and writes
// run on threads of their own (std::async), each through a page-aligned host block.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/swap_file.h"
#include "zero/offload_config.h"
#include "zero/param_backend.h"

namespace triad::zero {

class ParamFileBackend final : public ParamBackend {
 public:
  // Creates this rank's file in config.nvme_path: Error naming the key and the folder when
  // it is missing, not a folder or not writable.
  ParamFileBackend(const ParamOffloadConfig& config, const io::AioConfig& aio);

  size_t add(const Tensor& shard) override;
  std::unique_ptr<ParamTransfer> read(size_t slot) override;
  std::unique_ptr<ParamTransfer> write(size_t slot, const Tensor& shard) override;
  int64_t file_bytes() const override { return file_->size(); }
  int64_t host_bytes() const override { return 0; }  // (the blocks in flight count as the device's buffers)
  double read_seconds() const override { return 1e-9 * double(read_ns_.load()); }
  const std::string& path() const override { return file_->path(); }

 private:
  struct Slot {
    int64_t offset = 0, bytes = 0;  // bytes: the shard's, unpadded
    int64_t numel = 0;
    DType dtype = DType::f32;
    Device device = Device::cpu();
    uint32_t crc = 0;  // of the shard as last written
  };
  // The shard's bytes in a block padded for direct I/O, and their CRC into s.
  static io::AlignedBuffer block_of(Slot& s, const Tensor& shard);
  // The slot's bytes read into an aligned block and checked against its CRC (any thread).
  io::AlignedBuffer read_checked(int64_t offset, int64_t bytes, uint32_t crc);

  std::unique_ptr<io::SwapFile> file_;
  std::vector<Slot> slots_;
  std::atomic<int64_t> read_ns_{0};  // counted by the reading threads
};

}  // namespace triad::zero
