// Where the actor's EMA (rlhf/actor_ema.h, Note [Actor EMA]) keeps its average: the only
// thing that differs between an average beside the master weights, one in host memory and
// one in an NVMe swap file. ActorEma reaches the average through this interface alone.
//
// The average is stored as batches: batch k holds this rank's owned slices of the actor's
// k-th view batch (ZeroOptimizer::view_batches), added in order when the EMA is made, so
// that an update, a save or a load goes through it a view batch at a time as it goes
// through the master weights (Note [Streamed checkpoints]).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine.h"

namespace triad::rlhf {

class EmaStorage {
 public:
  using Slice = zero::ZeroOptimizer::Slice;
  virtual ~EmaStorage() = default;

  // Stores the next batch, starting from the values of `initial` (f32, any device).
  virtual void add(const std::vector<Slice>& initial) = 0;
  virtual size_t batches() const = 0;
  // Where read() hands the average out (and the update runs).
  virtual Device device() const = 0;
  // Batch k as 1-d f32 tensors, valid until the next read: its average (`current`), or
  // (false) tensors of its layout with any values, to be filled whole and written back. In
  // memory they are the average itself; from a file, a copy read in (Error naming the file
  // when what comes back differs from what was last written).
  virtual std::vector<Slice> read(size_t k, bool current = true) = 0;
  // Keeps `values` (what read(k) handed out, changed) as batch k: a no-op in memory. A file
  // may still be writing them when it returns (the values must not change after): a read of
  // batch k waits for that write, and finish() for every write.
  virtual void write(size_t k, const std::vector<Slice>& values) = 0;
  // Waits for the writes in flight; an error of one is thrown here (or by the next write or
  // read of its batch).
  virtual void finish() {}
  // read(k) comes next: a file starts reading it on a thread.
  virtual void prefetch(size_t) {}
  // Whether read() reads the average back in (from a file), which can fail on one rank: an
  // update then agrees on its outcome across the ranks (ActorEma::update).
  virtual bool reads_back() const { return false; }
  // Bytes it keeps between updates: param_bytes on the training device, host_bytes in host
  // memory apart from it, nvme_bytes in a file.
  virtual zero::ResidentBytes memory() const = 0;
};

// The storage an actor's average takes (Note [Actor EMA]): a swap file under nvme_path
// when its optimizer state or parameters are offloaded to NVMe, host memory when they are
// offloaded there, else beside the master weights on the training device.
std::unique_ptr<EmaStorage> make_ema_storage(const engine::Engine& actor);

}  // namespace triad::rlhf
