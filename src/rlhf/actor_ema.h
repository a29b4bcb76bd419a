// DeepSpeed-Chat's --enable_ema: an exponential moving average of the actor's weights,
// the model it hands out for serving.
//
// Note [Actor EMA]: after every optimizer step of the actor, ema = β·ema + (1 − β)·θ over
// the f32 master weights (β = ema_beta, 0.992), starting from the actor's initial weights.
// It is kept sharded as the master weights are: each rank averages the elements of its own
// ZeRO shard (ZeroOptimizer::StateView::owned_slices), so it costs 4 bytes per parameter over the
// data-parallel ranks and no communication. The master weights are read batch by batch
// (ZeroOptimizer::view_batches, Note [Streamed checkpoints]): with the optimizer's state or
// the parameters offloaded, what an update reads in at once is one batch's, not the shard's.
// The average itself lives in host memory when offload_param or offload_optimizer moves the
// parameters or the optimizer's state off the training device (a copy of the whole shard
// there would undo what the offload saves: in f32 training the master weights are the
// parameters, which the views bring onto the device); else beside the master weights.
// PPO and GRPO save it as output_dir/actor_ema.h5
// (a weights file: triad-generate samples from it) and, at every actor checkpoint
// step-N.h5, as ema-step-N.h5 beside it, which resuming at step N reads back (those of
// checkpoints that checkpoint.keep removed go with them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "parallel/communicator.h"

namespace triad::rlhf {

class ActorEma {
 public:
  // Starts from the actor's current weights. Error for an actor without ZeRO's optimizer.
  ActorEma(engine::Engine& actor, double beta);
  // After an optimizer step of the actor: ema = β·ema + (1 − β)·θ.
  void update();
  // Collective: the average as a weights file (f32).
  void save(const std::string& path, parallel::Communicator& world) const;
  // Collective: ema-step-N.h5 in the actor's checkpoint folder, just after its step-N.h5.
  void save_checkpoint(int64_t step, parallel::Communicator& world) const;
  // Collective: the average of the actor's checkpoint at `step` (Error naming the file when
  // it is missing or damaged).
  void load_checkpoint(int64_t step, parallel::Communicator& world);

 private:
  engine::Engine& actor_;
  double beta_;
  std::vector<zero::ZeroOptimizer::Slice> average_;  // on home_ (Note [Actor EMA])
  Device home_ = Device::cpu();  // the training device's, or the host with offload
};

}  // namespace triad::rlhf
