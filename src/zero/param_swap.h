// Stage 3's parameter offload: each rank's shard of every partitioned flat group lives out
// of the training device's memory and comes onto it only to be gathered or updated. Where
// it lives is the backend's (zero/param_backend.h): a swap file (ZeRO-Infinity,
// offload_param.device "nvme", zero/param_file_backend.h) or host memory (ZeRO-Offload's
// "cpu" on a GPU, zero/param_host_backend.h); this class decides when a shard moves and
// bounds how many are on the device at once.
//
// Note [Offloaded parameters]:
// - Slots: each group has one, holding its shard as last stored, written once when the
//   group is added (the device copy then freed). nvme: <nvme_path>/triad-params-rank<R>-<k>.swp
//   (R the world rank, k the number of such swaps this process made before), made as
//   io/swap_file.h makes its files (locked, a leftover replaced, never read) and removed
//   with the swap; each slot the shard's bytes padded to 4096. cpu: a host buffer per
//   shard, pinned with offload_param.pin_memory (zero/host_copies.h).
// - When a shard is on the device: ZeroOptimizer's prefetch starts reading the shards of
//   the units ahead (start_read: nvme on an I/O thread; cpu a copy queued on the device's
//   communication stream when pinned, else done at once), in the order and as far as
//   stage3_prefetch_bucket_size and the buffers allow, so the read overlaps the unit being
//   computed; a unit's all-gather starts once its shards have come in (bring_in waits for
//   the read, or reads when none was started; for a queued copy the device waits, not the
//   host), and the shards are dropped (drop:
//   unchanged, nothing written) once the gather has completed: the device holds only the
//   shards of the units in flight. The optimizer step brings each group's shard in (f32: read,
//   the next group's read started while this one is updated; mixed precision: a buffer only,
//   bring_in_to_overwrite, since the update writes every element from the master weights and
//   reads none), updates it and writes it back (store): nvme copies it into a block that a
//   thread writes behind, cpu queues its copy to the host (pinned, behind the update's work
//   on the device) or copies it (pageable); the step goes on to the next group and the next
//   forward begins, the shard's buffer counted as taken until the write is done. With the
//   optimizer's update on the host (offload_optimizer "cpu") the shard does not come onto
//   the device at all (Note [Parameters updated in place] in zero/host_shard_store.h): cpu's
//   is updated in its slot, and in mixed precision nvme's is written from the host buffer
//   the update wrote (store_from). A read of a
//   shard whose write is in flight waits for it first; a read that needs a buffer while
//   every one is taken waits for writes to end (a read ahead starts nothing). A write's
//   error is raised by the next call that reads or finishes it (flush waits for them all).
//   A checkpoint's view of the parameters brings every shard of its batch in; committing it
//   stores them.
// - Memory on the device: at most buffer_count shards in memory or being read at once, or
//   being written (ZeroOptimizer checks its units against it and limits its prefetch to fit;
//   start_read starts nothing when every buffer is taken); nvme's buffers hold at most
//   buffer_size elements each (ZeroOptimizer checks its groups against it; DeepSpeed's cpu
//   path has no fixed buffers, and neither has triad's). The swap asserts the bounds on every
//   bring_in. cpu keeps every shard in host memory besides: max_in_cpu does not bound it.
// - Checksums (nvme): the CRC-32C of each shard as last written is kept in memory and every
//   read is checked against it (on the I/O thread): a damaged or truncated file is an error
//   naming it, raised by the bring_in that needs the shard.
// - On a CPU training device "cpu" changes nothing (the parameters already are in host
//   memory); ParamOffloadConfig::host_store_on_cpu (tests) runs the host backend there
//   anyway, its copies plain copies between the slots and separate device shards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "io/swap_file.h"
#include "zero/flat_group.h"
#include "zero/offload_config.h"
#include "zero/param_backend.h"

namespace triad::zero {

class ParamSwap {
 public:
  // The backend config.device names (nvme or cpu) for shards on `device`. nvme creates this
  // rank's file in config.nvme_path: Error naming the key and the folder when it is
  // missing, not a folder or not writable.
  ParamSwap(const ParamOffloadConfig& config, const io::AioConfig& aio, Device device = Device::cpu());

  // Waits for the transfers in flight.
  ~ParamSwap();
  ParamSwap(const ParamSwap&) = delete;
  ParamSwap& operator=(const ParamSwap&) = delete;

  // Gives the partitioned group's shard (in memory) a slot, writes it there and drops it.
  void add(FlatGroup& group);
  // Starts reading the group's shard, unless it is in memory, being read, or every buffer
  // is taken (then nothing happens).
  void start_read(FlatGroup& group);
  // Whether bring_in would not wait: the shard is in memory or its read has completed.
  bool ready(const FlatGroup& group) const;
  // Reads the group's shard into memory (no-op when it is in), waiting for a started read.
  // bounded: the training path, which asserts the buffer bound (waiting for writes to free
  // one); a checkpoint's view brings every shard of its batch in, once every write is done.
  void bring_in(FlatGroup& group, bool bounded = true);
  // As bring_in, for a caller that writes every element of the shard before anything reads
  // it (the update in mixed precision, which writes the 16-bit parameters from the master
  // weights): the shard's memory is taken (a buffer, as bring_in's) without reading the slot.
  void bring_in_to_overwrite(FlatGroup& group);
  // Drops the in-memory shard, or the read in flight, without writing it (it is what the
  // slot holds).
  void drop(FlatGroup& group);
  // Drops the in-memory shard, writing it to its slot behind.
  void store(FlatGroup& group);
  // Writes `host`, the group's shard in host memory (what the host update wrote: Note
  // [Parameters updated in place] in zero/host_shard_store.h), to its slot behind, as store()
  // writes an in-memory shard; the shard is not in memory. A file only (nvme): host memory
  // is updated in its slot (host_slot).
  void store_from(FlatGroup& group, const Tensor& host);
  // Waits for the writes in flight; rethrows the first error.
  void flush();
  // The host buffer the group's shard lives in (cpu; undefined with nvme): Note [Parameters
  // updated in place] in zero/host_shard_store.h. A caller reads and writes it only after
  // settle(group) and before the next call on the group.
  Tensor host_slot(const FlatGroup& group) const { return backend_->host_slot(slot(group).index); }
  // Waits for the group's write in flight, if any (rethrowing its error); returns whether the
  // shard is then neither in memory (where it may be newer) nor being read: its slot holds it.
  bool settle(FlatGroup& group);

  // Bytes of shards on the device, being read or being written now, and the most there
  // have been at once.
  int64_t resident_bytes() const { return resident_bytes_; }
  int64_t peak_resident_bytes() const { return peak_bytes_; }
  // Bytes the slots take: in the swap file, in host memory apart from the device's.
  int64_t file_bytes() const { return backend_->file_bytes(); }
  int64_t host_bytes() const { return backend_->host_bytes(); }
  // The shards read so far, the seconds their reads took (on whichever thread) and the
  // seconds bring_in spent reading or waiting for them on the caller's thread: the part of
  // the reads the compute did not hide.
  struct ReadTimes {
    int64_t reads = 0;
    double read_seconds = 0, waited_seconds = 0;
  };
  ReadTimes read_times() const { return {reads_, backend_->read_seconds(), waited_seconds_}; }
  int64_t writes() const { return writes_; }      // the shards written so far (store, store_from)
  int64_t arrivals() const { return arrivals_; }  // the shards come into memory so far (bring_in...)
  const std::string& path() const { return backend_->path(); }  // the swap file's (nvme)

 private:
  struct Slot {
    size_t index = 0;   // the backend's
    int64_t bytes = 0;  // the shard's
    bool resident = false;
    std::unique_ptr<ParamTransfer> reading;  // start_read's, in flight or done
    std::unique_ptr<ParamTransfer> writing;  // store's, in flight or done
  };
  Slot& slot(const FlatGroup& group);
  const Slot& slot(const FlatGroup& group) const;
  // Waits for the slot's write, if any, giving its buffer back; rethrows its error.
  void finish_write(Slot& s);
  void finish_writes(bool wait_all);              // those done, or (wait_all) every one
  void make_room();                               // waits for writes until a buffer is free
  std::unique_ptr<ParamTransfer> start(Slot& s);  // the backend's read, counted
  // Counts the slot's buffer taken or given back (resident_, resident_bytes_, peak_bytes_).
  void take_buffer(const Slot& s);
  void give_back(const Slot& s);

  ParamOffloadConfig config_;
  std::unique_ptr<ParamBackend> backend_;  // (outlives the slots' transfers)
  std::map<const FlatGroup*, Slot> slots_;
  int64_t resident_ = 0;  // shards in memory or being read
  int64_t resident_bytes_ = 0, peak_bytes_ = 0;
  int64_t reads_ = 0, writes_ = 0, arrivals_ = 0;
  double waited_seconds_ = 0;
};

}  // namespace triad::zero
