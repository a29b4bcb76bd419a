// Note [Recorded steps]: with cuda_graph.enabled, a training step (the forward and backward
// of every micro-batch, then the optimizer step) is recorded once as a CUDA graph and each
// later step replays it with one launch (Megatron-core's full-iteration CUDA graph). The
// host then spends nothing per kernel, and runs ahead of the device by whole steps.
//
// A replay repeats every launch with the arguments it was recorded with, so what changes
// from one step to the next lives in device memory that the host writes before the replay:
// - the micro-batches: copied into fixed buffers (StepRecording::load);
// - the rate, betas and bias corrections: Adam reads its constants from a table that ZeRO
//   writes before each step (Note [Adam's constants in memory], tensor/optimizer_ops.h;
//   ZeroOptimizer::prepare_step); with fp16's loss scale, which stays on the device, from
//   the row of its candidates that the step's overflow test picks there (Note [Loss scale
//   on the device] in zero/device_loss_scale.h);
// - the step's losses, gradient norm and, with loss scaling, its outcome: written into
//   fixed tensors, which the trainer copies out after the replay (StepValues), as it does a
//   plain step's.
// The host side of the step (autograd, ZeRO's bookkeeping, module hooks) runs once, at the
// recording; the Engine counts each replayed step itself (ZeroOptimizer::count_replayed_step).
//
// The first cuda_graph.warmup_steps steps run plainly, so that everything a step creates
// once (the optimizer's state, cuBLASLt's workspaces) exists before the recording. What a
// recording cannot hold is refused: the config's keys by parse_config (more than one
// process, offload, the delayed update, MoE, dropout, timed phases);
// a step that draws random numbers anyway, or copies a host tensor to the device, or makes
// the host wait for the device, fails the recording with an Error naming why. The memory a
// step allocates is the graph's for the run (Note [Graph pools] in cuda/caching_allocator.h):
// what the plain step allocated and freed, held at once.
//
// On a CPU device nothing is recorded: each step runs as it would be recorded (the same
// buffers, Adam's constants read from memory, the same checks), with the same results as a
// plain step, which is what the CPU's tests check.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tensor/device_runtime.h"
#include "tensor/tensor.h"

namespace triad::engine {

class StepRecording {
 public:
  // Buffers on `device` for micro-batches shaped as inputs[m] and targets[m].
  StepRecording(Device device, const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets);

  // Copies a step's micro-batches into the buffers, ordered on the device's stream; the host
  // does not wait. Error naming the micro-batch when one's shape or dtype is not the first's.
  void load(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets);
  const std::vector<Tensor>& inputs() const { return inputs_; }
  const std::vector<Tensor>& targets() const { return targets_; }
  // Where the step writes its micro-batches' losses ((m,) f32) and its gradient norm ((1,) f64).
  const Tensor& losses() const { return losses_; }
  const Tensor& grad_norm() const { return grad_norm_; }
  // With loss scaling, where it writes its outcome ((kStepOutcome,) f64: the rate, whether
  // it was skipped, the scale after it; zero::ZeroOptimizer::StepNorm).
  const Tensor& outcome() const { return outcome_; }

  // Runs the step: on a CUDA device the first call records `step` (its host side runs now)
  // and replays it, later calls replay the recording without calling `step`; on the CPU
  // every call runs `step`. Returns whether `step` ran. Error naming why when the recording
  // fails, or when `step` drew from the random generators (a replay would repeat the draws).
  bool run(const std::function<void()>& step);
  // Bytes the step allocated beyond what was in use before it, at its peak, as measured when
  // `step` last ran (mem.activation_peak_bytes of a replayed step).
  double activation_peak() const { return activation_peak_; }

 private:
  Device device_;
  std::vector<Tensor> inputs_, targets_;
  Tensor losses_, grad_norm_, outcome_;
  std::unique_ptr<DeviceGraph> graph_;
  double activation_peak_ = 0;
};

}  // namespace triad::engine
