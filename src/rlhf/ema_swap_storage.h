// The actor's EMA in an NVMe swap file (Note [Actor EMA]), for ZeRO-Infinity: with the
// optimizer's state or the parameters offloaded to NVMe, a copy of the average in host
// memory would undo what the offload saves.
//
// Contracts:
// - File: <nvme_path>/triad-ema-rank<R>-<k>.swp (zero/nvme_swap_file.h: R the world rank, k
//   the swap files this process made before), created with the storage (io/swap_file.h:
//   locked, replacing a leftover of an earlier run, which is never read) and removed with
//   it; each add() grows it by the batch's record and writes the batch's initial values, so
//   it has its full size once the EMA is made. Its transfers take the `aio` section's knobs,
//   as the optimizer's store does.
// - Record of a batch: its slices' f32 elements back to back, padded to 4096 bytes.
// - Memory: a batch read in lives in its own aligned host block while the slices handed
//   out refer to it; the storage keeps none between reads but the one read ahead and the
//   one being written.
// - Checksums: the CRC-32C of each record as last written is kept in memory, and every read
//   is checked against it (after SwapFile's size check): a damaged or truncated file is an
//   Error naming it (on the rank whose file it is; ActorEma makes it every rank's).
// - prefetch(k) reads batch k on a thread while the caller works on another; read(k) takes
//   that read (its error included) and any other read ahead is waited for and dropped.
// - write(k) writes batch k's record on a thread (its checksum taken first) while the caller
//   goes on to the next batch; the next write, a read or read-ahead of batch k, finish() and
//   the destructor wait for it. At most one read and one write are in flight.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "io/swap_file.h"
#include "rlhf/ema_storage.h"

namespace triad::rlhf {

class EmaSwapStorage : public EmaStorage {
 public:
  // Creates this rank's file in `folder`, the value of config key `key`: Error naming the
  // key and the folder when it is missing, not a folder or not writable.
  EmaSwapStorage(const std::string& key, const std::string& folder, const io::AioConfig& aio);
  // Waits for the transfers in flight; the file goes.
  ~EmaSwapStorage() override;

  void add(const std::vector<Slice>& initial) override;
  size_t batches() const override { return batches_.size(); }
  Device device() const override { return Device::cpu(); }
  std::vector<Slice> read(size_t k, bool current = true) override;
  void write(size_t k, const std::vector<Slice>& values) override;
  void prefetch(size_t k) override;
  void finish() override;
  bool reads_back() const override { return true; }
  zero::ResidentBytes memory() const override { return {.nvme_bytes = file_->size()}; }

  const std::string& path() const { return file_->path(); }

 private:
  struct Batch {
    std::vector<Slice> layout;    // names, shapes and ranges (values undefined)
    std::vector<int64_t> counts;  // each slice's elements
    int64_t offset = 0, elements = 0;
    uint32_t crc = 0;  // of the elements as last written
    int64_t record_bytes() const { return io::align_up(elements * 4); }
    // Host memory for the record, aligned for direct I/O (its values undefined).
    Tensor new_record() const;
  };
  // The record of batch k read in and checked, on the host.
  Tensor read_record(size_t k) const;
  // Starts writing `record` (elements first, padding after) as batch k's on a thread, once
  // the write in flight is done, and keeps its checksum.
  void write_record(size_t k, const Tensor& record);
  // Waits for the write in flight, if any (its error thrown).
  void finish_write();
  // The batch's slices as views of `record`.
  std::vector<Slice> slices_of(const Batch& b, const Tensor& record) const;
  void drop_read_ahead();

  std::unique_ptr<io::SwapFile> file_;
  std::vector<Batch> batches_;
  size_t ahead_ = 0;  // the batch read ahead, when reading_ is valid
  std::future<Tensor> reading_;
  size_t writing_batch_ = 0;  // the batch being written, when writing_ is valid
  std::future<void> writing_;
};

}  // namespace triad::rlhf
