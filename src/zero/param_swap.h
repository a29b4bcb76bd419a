// ZeRO-Infinity's parameter offload (offload_param.device "nvme"): at stage 3 each rank's
// shard of every partitioned flat group lives in a swap file and comes into memory only to
// be gathered or updated.
//
// Note [Offloaded parameters]:
// - File: <nvme_path>/triad-params-rank<R>-<k>.swp (R the world rank, k the number of such
//   swaps this process made before), made as io/swap_file.h makes its files (locked, a
//   leftover replaced, never read) and removed with the swap. Each group has a slot: its
//   shard's bytes padded to 4096, written once when the group is added.
// - When a shard is in memory: ZeroOptimizer's prefetch starts reading the shards of the
//   units ahead on an I/O thread (start_read), so the read overlaps the unit being
//   computed; a unit's all-gather starts once its shards have come in (bring_in waits for
//   the read, or reads on the caller's thread when none was started), and the shards are
//   dropped (drop: unchanged, nothing written) once the gather has completed. The
//   optimizer step brings each group's shard in (the next group's read started on the
//   I/O thread while this one is updated), updates it and writes it back (store): the shard
//   is copied into a block that a thread writes behind while the step goes on to the next
//   group and the next forward begins; its buffer counts as taken until the write is done.
//   A read of a shard whose write is in flight waits for it first; a read that needs a
//   buffer while every one is taken waits for writes to end (a read ahead starts nothing).
//   A write's error is raised by the next call that reads or finishes it (flush waits for
//   them all). A checkpoint's view of the parameters brings every shard in; committing it
//   stores them.
// - Memory: at most buffer_count shards in memory or being read at once, each of at most
//   buffer_size elements, or being written (ZeroOptimizer checks its groups against both and
//   limits its prefetch to fit; start_read starts nothing when every buffer is taken); the
//   swap asserts the bound on every bring_in.
// - Checksums: the CRC-32C of each shard as last written is kept in memory and every read
//   is checked against it (on the I/O thread for a started read): a damaged or truncated
//   file is an error naming it, raised by the bring_in that needs the shard.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>

#include "io/swap_file.h"
#include "zero/flat_group.h"
#include "zero/offload_config.h"

namespace triad::zero {

class ParamSwap {
 public:
  // Creates this rank's file in config.nvme_path: Error naming the key and the folder when
  // it is missing, not a folder or not writable.
  ParamSwap(const ParamOffloadConfig& config, const io::AioConfig& aio);

  // Waits for the reads in flight.
  ~ParamSwap();
  ParamSwap(const ParamSwap&) = delete;
  ParamSwap& operator=(const ParamSwap&) = delete;

  // Gives the partitioned group's shard (in memory) a slot, writes it there and drops it.
  void add(FlatGroup& group);
  // Starts reading the group's shard on an I/O thread, unless it is in memory, being read,
  // or every buffer is taken (then nothing happens).
  void start_read(FlatGroup& group);
  // Whether bring_in would not wait: the shard is in memory or its read has completed.
  bool ready(const FlatGroup& group) const;
  // Reads the group's shard into memory (no-op when it is in), waiting for a started read.
  // bounded: the training path, which asserts the buffer bound (waiting for writes to free
  // one); a checkpoint's view brings every shard of its batch in, once every write is done.
  void bring_in(FlatGroup& group, bool bounded = true);
  // Drops the in-memory shard, or the read in flight, without writing it (it is what the
  // file holds).
  void drop(FlatGroup& group);
  // Drops the in-memory shard, writing it to its slot behind (on a thread).
  void store(FlatGroup& group);
  // Waits for the writes in flight; rethrows the first error.
  void flush();

  // Bytes of shards in memory, being read or being written now, and the most there have
  // been at once.
  int64_t resident_bytes() const { return resident_bytes_; }
  int64_t peak_resident_bytes() const { return peak_bytes_; }
  int64_t file_bytes() const { return file_->size(); }
  // The shards read so far, the seconds their reads took (on whichever thread) and the
  // seconds bring_in spent reading or waiting for them on the caller's thread: the part of
  // the reads the compute did not hide.
  struct ReadTimes {
    int64_t reads = 0;
    double read_seconds = 0, waited_seconds = 0;
  };
  ReadTimes read_times() const { return {reads_.load(), 1e-9 * double(read_ns_.load()), waited_seconds_}; }
  const std::string& path() const { return file_->path(); }

 private:
  struct Slot {
    int64_t offset = 0, bytes = 0;  // bytes: the shard's, unpadded
    uint32_t crc = 0;               // of the shard as last written
    bool resident = false;
    std::future<io::AlignedBuffer> reading;  // start_read's, in flight or done
    std::future<void> writing;               // store's, in flight or done
  };
  Slot& slot(const FlatGroup& group);
  const Slot& slot(const FlatGroup& group) const;
  // The shard's bytes in a block padded for direct I/O.
  static io::AlignedBuffer block_of(const Slot& s, const Tensor& shard);
  // Waits for the slot's write, if any, giving its buffer back; rethrows its error.
  void finish_write(Slot& s);
  void finish_writes(bool wait_all);  // those done, or (wait_all) every one
  void make_room();  // waits for writes until a buffer is free
  // The slot's bytes read into an aligned block and checked against its CRC (any thread).
  io::AlignedBuffer read_checked(int64_t offset, int64_t bytes, uint32_t crc);
  // Counts the slot's buffer taken or given back (resident_, resident_bytes_, peak_bytes_).
  void take_buffer(const Slot& s);
  void give_back(const Slot& s);

  ParamOffloadConfig config_;
  std::unique_ptr<io::SwapFile> file_;
  std::map<const FlatGroup*, Slot> slots_;
  int64_t resident_ = 0;  // shards in memory or being read
  int64_t resident_bytes_ = 0, peak_bytes_ = 0;
  std::atomic<int64_t> reads_{0}, read_ns_{0};  // counted by the reading thread
  double waited_seconds_ = 0;
};

}  // namespace triad::zero
