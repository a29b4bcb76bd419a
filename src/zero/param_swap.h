// ZeRO-Infinity's parameter offload (offload_param.device "nvme"): at stage 3 each rank's
// shard of every partitioned flat group lives in a swap file and comes into memory only to
// be gathered or updated.
//
// Note [Offloaded parameters]:
// - File: <nvme_path>/triad-params-rank<R>-<k>.swp (R the world rank, k the number of such
//   swaps this process made before), made as io/swap_file.h makes its files (locked, a
//   leftover replaced, never read) and removed with the swap. Each group has a slot: its
//   shard's bytes padded to 4096, written once when the group is added.
// - When a shard is in memory: ZeroOptimizer brings it in (bring_in) when it starts the
//   group's all-gather, which its prefetch starts one unit ahead of the unit's use, and
//   drops it (drop: unchanged, nothing written) once the gather has completed; the
//   optimizer step brings each group's shard in, updates it and writes it back (store).
//   A checkpoint's view of the parameters brings every shard in; committing it stores them.
// - Memory: at most buffer_count shards at once, each of at most buffer_size elements
//   (ZeroOptimizer checks its groups against both and limits its prefetch to fit); the
//   swap asserts the bound on every bring_in.
// - Checksums: the CRC-32C of each shard as last written is kept in memory and every read
//   is checked against it: a damaged or truncated file is an error naming it.
#pragma once

#include <cstdint>
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

  // Gives the partitioned group's shard (in memory) a slot, writes it there and drops it.
  void add(FlatGroup& group);
  // Reads the group's shard into memory (no-op when it is in). bounded: the training path,
  // which asserts the buffer bound; a checkpoint's view brings every shard in.
  void bring_in(FlatGroup& group, bool bounded = true);
  // Drops the in-memory shard without writing it (it is what the file holds).
  void drop(FlatGroup& group);
  // Writes the in-memory shard to its slot and drops it.
  void store(FlatGroup& group);

  // Bytes of shards in memory now, and the most there have been at once.
  int64_t resident_bytes() const { return resident_bytes_; }
  int64_t peak_resident_bytes() const { return peak_bytes_; }
  int64_t file_bytes() const { return file_->size(); }
  const std::string& path() const { return file_->path(); }

 private:
  struct Slot {
    int64_t offset = 0, bytes = 0;  // bytes: the shard's, unpadded
    uint32_t crc = 0;               // of the shard as last written
    bool resident = false;
  };
  Slot& slot(const FlatGroup& group);
  void write(const Slot& s, const Tensor& shard);

  ParamOffloadConfig config_;
  std::unique_ptr<io::SwapFile> file_;
  std::map<const FlatGroup*, Slot> slots_;
  int64_t resident_ = 0;
  int64_t resident_bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace triad::zero
