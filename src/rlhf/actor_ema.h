// DeepSpeed-Chat's --enable_ema: an exponential moving average of the actor's weights,
// the model it hands out for serving.
//
// Note [Actor EMA]: after every optimizer step of the actor, ema = β·ema + (1 − β)·θ over
// the f32 master weights (β = ema_beta, 0.992), starting from the actor's initial weights.
// It is kept sharded as the master weights are: each rank averages the elements of its own
// ZeRO shard (ZeroOptimizer::StateView::owned_slices), so it costs 4 bytes per parameter over the
// data-parallel ranks and no communication. Everything goes a view batch at a time
// (ZeroOptimizer::view_batches, Note [Streamed checkpoints]): an update reads one batch of
// the master weights beside that batch's average, and saving and loading stream the average
// batch by batch (engine::save_weight_batches, load_weight_batches): with the optimizer's
// state or the parameters offloaded, what is in memory at once is a batch's, not the shard's.
// Where the average lives is an EmaStorage's (rlhf/ema_storage.h), chosen with the actor:
// - beside the master weights on the training device, without offload;
// - in host memory when offload_param or offload_optimizer moves the parameters or the
//   optimizer's state to the host (a copy of the whole shard on the device would undo what
//   the offload saves: in f32 training the master weights are the parameters, which the
//   views bring onto the device);
// - in a swap file under nvme_path when either device is "nvme" (rlhf/ema_swap_storage.h,
//   ZeRO-Infinity: a host copy would undo what NVMe offload saves), through the `aio`
//   section's asynchronous I/O, each batch's CRC-32C checked when it is read back, the
//   next batch read ahead and the last one written back while this one is updated; the
//   update then runs on the host. A
//   damaged record found by one rank fails the update on every rank (ranks agree on its
//   outcome as a save does), so that every rank names the problem and none waits for another.
// What a save writes is the same file wherever the average lives. The rlhf metrics count it
// as the model "actor_ema" (memory(): param_bytes on the device, host_bytes apart from it,
// nvme_bytes in its file).
// PPO and GRPO save it as output_dir/actor_ema.h5
// (a weights file: triad-generate samples from it) and, at every actor checkpoint
// step-N.h5, as ema-step-N.h5 beside it, which resuming at step N reads back (those of
// checkpoints that checkpoint.keep removed go with them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "parallel/communicator.h"
#include "rlhf/ema_storage.h"

namespace triad::rlhf {

class ActorEma {
 public:
  // Starts from the actor's current weights. Error for an actor without ZeRO's optimizer, or
  // (nvme) naming the nvme_path key and folder when its swap file cannot be made there.
  ActorEma(engine::Engine& actor, double beta);
  ~ActorEma();  // its swap file, if any, goes
  ActorEma(const ActorEma&) = delete;
  ActorEma& operator=(const ActorEma&) = delete;
  // After an optimizer step of the actor: ema = β·ema + (1 − β)·θ. In a swap file,
  // collective over `world` (the actor's ranks): a record that reads back other than was
  // written is an Error on every rank naming the file and what differs, the other ranks
  // adding which rank found it (engine::throw_if_any, as a save's); in memory, local.
  void update(parallel::Communicator& world);
  // Collective: the average as a weights file (f32). A damaged swap file is an Error on every rank.
  void save(const std::string& path, parallel::Communicator& world) const;
  // Collective: ema-step-N.h5 in the actor's checkpoint folder, just after its step-N.h5.
  void save_checkpoint(int64_t step, parallel::Communicator& world) const;
  // Collective: the average of the actor's checkpoint at `step` (Error naming the file when
  // it is missing or damaged).
  void load_checkpoint(int64_t step, parallel::Communicator& world);
  // The bytes the average keeps on this rank (EmaStorage::memory).
  zero::ResidentBytes memory() const;

 private:
  // update()'s arithmetic, on this rank alone.
  void average();

  engine::Engine& actor_;
  double beta_;
  std::unique_ptr<EmaStorage> storage_;  // Note [Actor EMA]
};

}  // namespace triad::rlhf
