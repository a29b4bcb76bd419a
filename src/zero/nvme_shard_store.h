// A shard store on NVMe (offload_optimizer.device "nvme"): the optimizer's state lives in
// one file per rank, and only a few sub-groups of it are in memory at a time.
//
// Note [Offloaded optimizer state]:
// - File: <nvme_path>/triad-optimizer-rank<R>-<k>.swp, R the world rank and k the number
//   of such stores this process made before (an RLHF job runs several engines). It is
//   created with the store (io/swap_file.h: locked, replacing a leftover of an earlier run,
//   which is never read) and removed with it; each add() grows it by the entry's record and
//   writes the entry's initial state, so it has its full size once the optimizer is built.
// - Record of an entry of n elements: its parts (master weights when there are any, then
//   exp_avg and exp_avg_sq), each padded to 4096 bytes, back to back.
// - Memory: at most buffer_count records (buffers of the largest record's size). An entry
//   stays in its buffer after release, written back, until the buffer is taken for another
//   entry (least recently used first): a state that fits in buffer_count sub-groups is read
//   once. On a GPU, the acquired entry is copied to device tensors and back.
// - Checksums: the CRC-32C of every part as last written is kept in memory, and every read
//   is checked against it and its size: a damaged or truncated file is an error naming it.
// - Pipelining (DeepSpeed's pipeline_read, pipeline_write): prefetch() starts reading the
//   next entry on a thread while the update works on this one (and the next step's first
//   entry during its forward and backward), and release() hands the write-back to a thread
//   and returns (the buffer is reused once it is done; the next step's forward and backward
//   overlap it). Without them, acquire() reads and release() writes on the caller's thread.
//
// Note [Offloaded gradients]: made with `gradients` (ZeroOptimizer at stages 2 and 3, when
// nothing needs the rank's gradient shard whole: no tensor-parallel partial sums, no tied
// or pipelined groups, no delayed update), the store keeps each entry's reduced gradient in
// the file too, so a rank's resident memory no longer grows by 4 bytes a parameter.
// - File: each record is followed by a gradient part (f32, padded to 4096 bytes), written
//   only by accumulate_gradient; its CRC-32C is kept and checked like the state's.
// - accumulate_gradient: the entry's gradient so far (none after clear_gradients: zeros) is
//   read into one of two gradient buffers (or found still there from its last write), the
//   new values are added in the training dtype (a bf16 shard's sum is rounded to bf16, as
//   ZeroOptimizer's in-memory shard is), and the buffer is written back (with
//   pipeline_write behind, on a thread, while the backward goes on; a buffer is reused once
//   its write is done). Reading the sum so far (a later micro-batch of an accumulation, once
//   the two buffers have moved on to other sub-groups) is the caller's, the backward's.
// - acquire hands the gradient out with the state (ShardState::grad). A read ahead carries
//   the gradient as it was when the read started (each entry counts the versions of its
//   gradient): acquire reads it again when it changed since, so the next step's first
//   sub-group may still come in during the backward.
// - Memory: buffer_count records, each with a gradient part, and the two gradient buffers.
#pragma once

#include <array>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "io/swap_file.h"
#include "zero/offload_config.h"
#include "zero/shard_store.h"

namespace triad::zero {

class NvmeShardStore : public ShardStore {
 public:
  // Creates this rank's file in config.nvme_path: Error naming the key and the folder when
  // it is missing, not a folder or not writable.
  // gradients: keep each entry's gradient too (Note [Offloaded gradients]).
  NvmeShardStore(Device device, const OffloadConfig& config, const io::AioConfig& aio, bool gradients = false);
  // Waits for the transfers in flight; the file goes.
  ~NvmeShardStore() override;

  size_t add(Tensor master, int64_t elements) override;
  const ShardState& acquire(size_t entry) override;
  void release(size_t entry, bool dirty) override;
  void prefetch(size_t entry) override;
  Tensor read_part(size_t entry, ShardPart part) override;
  void write_part(size_t entry, ShardPart part, const Tensor& values) override;
  bool keeps_gradients() const override { return gradients_; }
  Tensor accumulate_gradient(size_t entry, const Tensor& values) override;
  void clear_gradients() override;
  // On the cpu, the buffers; on a GPU, the acquired entry's copy.
  int64_t device_bytes() const override;
  // On a GPU, the buffers (on the cpu they are device_bytes); the file.
  int64_t host_bytes() const override;
  int64_t file_bytes() const override { return file_->size(); }

  const std::string& path() const { return file_->path(); }

 private:
  struct Entry {
    int64_t elements = 0, offset = 0;
    int parts = 0;                   // 3 with master weights, else 2
    std::array<uint32_t, 3> crc{};   // of each part as last written
    // Note [Offloaded gradients]: whether a gradient was accumulated since the last clear
    // (else it is zero), its CRC-32C as last written, and how often it changed.
    bool has_grad = false;
    uint32_t grad_crc = 0;
    uint64_t grad_version = 0;
    int64_t part_bytes() const { return io::align_up(elements * 4); }
    int64_t record_bytes() const { return parts * part_bytes(); }
    int index(ShardPart p) const { return p == ShardPart::master ? 0 : parts - (p == ShardPart::exp_avg ? 2 : 1); }
  };
  enum class Stage { idle, reading, held, writing };
  struct Buffer {
    Tensor host;             // f32 over an aligned block of the largest record's size
    int64_t entry = -1;      // the entry it holds (-1: none)
    Stage stage = Stage::idle;
    std::future<void> io;    // its read or write in flight
    uint64_t used = 0;       // when it was last acquired or prefetched (least recently used goes first)
    ShardState state;        // what acquire() handed out
    Tensor grad;             // gradients: over an aligned block of the largest part's size
    uint64_t grad_version = 0;  // the entry's gradient version it holds
  };
  // A gradient being accumulated and written behind (Note [Offloaded gradients]).
  struct GradBuffer {
    Tensor host;  // f32 over an aligned block of the largest part's size
    int64_t entry = -1;
    std::future<void> io;
  };

  int64_t host_buffer_bytes() const;  // the buffers' (records, gradients)
  Buffer* holding(size_t entry);
  // A buffer to read another entry into (the least recently used that is not held; waiting
  // for its write), a new one while fewer than buffer_count exist, or null when every one is held or
  // being read.
  Buffer* free_buffer(bool wait);
  void start_read(Buffer& b, size_t entry);
  void start_write(Buffer& b);
  void finish(Buffer& b);  // waits for its transfer; rethrows its error
  void finish_all();
  Tensor part_view(const Tensor& record, const Entry& e, int index) const;
  // Error naming the file when a part read back into `data` differs from what was written.
  void check(const float* data, size_t entry, ShardPart part) const;
  // The entry's gradient (version `version`, CRC-32C `crc` when `has`) into `out`: from
  // the file, checked, or zeros.
  void read_gradient(const Entry& e, size_t entry, bool has, uint32_t crc, const Tensor& out) const;
  // Waits for the gradient buffer's write (rethrows its error).
  static void finish(GradBuffer& g);
  GradBuffer* gradient_holding(size_t entry);

  Device device_;
  OffloadConfig config_;
  std::unique_ptr<io::SwapFile> file_;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  bool gradients_ = false;
  std::array<GradBuffer, 2> grad_buffers_;
  size_t next_grad_buffer_ = 0;
  int64_t record_bytes_ = 0;  // the largest record's (state parts only)
  int64_t part_bytes_ = 0;    // the largest part's
  bool sealed_ = false;       // entries are fixed once the first is acquired, prefetched or read
  int64_t held_ = -1;
  uint64_t clock_ = 0;
};

}  // namespace triad::zero
