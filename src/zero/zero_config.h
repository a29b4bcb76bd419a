// ZeroConfig: what ZeRO is asked to do (the `zero_optimization` section, the precision's
// storage dtype and loss scale, how gradients are averaged), held as such by the training
// config (config/config.h) and handed to ZeroOptimizer (zero/zero_optimizer.h).
#pragma once

#include <cstdint>

#include "io/swap_file.h"
#include "optim/loss_scaler.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"
#include "zero/offload_config.h"

namespace triad::zero {

struct ZeroConfig {
  int stage = 0;  // 0, 1, 2 or 3
  // Storage of parameters and gradients: f32, or bf16/f16 (mixed precision: f32 master
  // weights and Adam moments in the optimizer's shard; activations follow the parameters'
  // dtype: Note [16-bit activations] in autograd/functions.cpp).
  DType dtype = DType::f32;
  optim::LossScaleConfig loss_scale;  // fp16: optim/loss_scaler.h
  bool overlap_comm = true;  // start each group's reduction during the backward
  // Most elements one gradient reduction (all-reduce or reduce-scatter input) or one
  // parameter all-gather (output; stages 1 and 2) moves at once (zero/buckets.h). A bucket
  // never spans groups: a smaller group is reduced on its own.
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  // Stage 3 keeps parameters of at most this many elements whole on every rank (as stage 2
  // does; DeepSpeed's rule): gathering them each time costs more latency than they save.
  int64_t stage3_param_persistence_threshold = 100000;
  // Stage 3: elements of the units ahead whose gathering starts early (the next unit
  // always; then further units while the total stays within this).
  int64_t stage3_prefetch_bucket_size = 50000000;
  // Gradients are multiplied by 1/gradient_predivide_factor before they are reduced, and
  // the sum by gradient_predivide_factor/ranks after (DeepSpeed's gradient_predivide_factor;
  // its prescale_gradients is a factor of ranks): the mean is the same, the partial sums
  // smaller, which keeps 16-bit sums over many ranks from overflowing.
  double gradient_predivide_factor = 1.0;
  // Reduce each group's gradient once per step, in step(), instead of as the backward
  // completes it (Note [ZeRO in a pipeline stage]).
  bool defer_reduction = false;
  // ZeRO++ at stage 3 (Note [ZeRO++]): qwZ, the forward gathers in int8; hpZ, with more
  // than one rank, the backward gathers over groups of this many dp ranks; qgZ, gradients
  // reduced by two int4 all-to-alls. Blocks of weight_quantization_block elements in qwZ's
  // gathers and of gradient_quantization_block in qgZ's all-to-alls (int4 needs the smaller
  // blocks: Note [ZeRO++]).
  bool quantized_weights = false;
  int hpz_partition_size = 1;
  bool quantized_gradients = false;
  int64_t weight_quantization_block = kQuantBlock;
  int64_t gradient_quantization_block = kGradientQuantBlock;
  // Where the master weights and Adam's moments live (zero/offload_config.h; stages 1-3).
  // With device nvme they move between files and memory by sub-groups of at most
  // sub_group_size elements of a group's shard (Note [Offloaded optimizer state] in
  // zero/nvme_shard_store.h), each transfer as the aio section says; with device cpu and
  // ratio below 1 such sub-groups are what stays on the device or goes to the host (Note
  // [Partial offload] in zero/partial_offload_store.h).
  OffloadConfig offload_optimizer;
  // Stage 3: where each rank's parameter shards live between uses (zero/param_swap.h).
  ParamOffloadConfig offload_param;
  int64_t sub_group_size = 1000000000;
  io::AioConfig aio;
  // The ZeRO-Offload paper's delayed parameter update (Note [Delayed parameter update] in
  // zero/zero_optimizer.h): from step warmup_steps on, each step's update runs on a thread
  // while the next step's forward and backward run on the weights before it.
  struct DelayedUpdate {
    bool enabled = false;
    int64_t warmup_steps = 40;  // steps taken the ordinary way first
  };
  DelayedUpdate delayed_update;

  // Error naming the zero_optimization key (or gradient_predivide_factor, or aio key) that
  // is out of range or does not fit the others (ZeRO++ below stage 3; hpZ groups that do not
  // tile the data_parallel ranks ZeRO runs over; offload at stage 0, parameter offload below stage 3, either without
  // its folder, an offload ratio outside [0, 1] or below 1 with nvme; a delayed update with a negative warm-up, with
  // parameter offload or in a pipeline stage). The config's parser (config/config.h) and ZeroOptimizer both check with
  // it: the one statement of each rule.
  void validate(int64_t data_parallel) const;

 private:
  void validate_offload() const;
  void validate_delayed_update() const;
};

}  // namespace triad::zero
