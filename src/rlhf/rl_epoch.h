// One PPO or GRPO epoch over a step's experience (Note [RL step] in rlhf/rl_training.h): the
// actor's (and the critic's) gradients accumulated over the rank's micro-batches, ready for
// their optimizer steps, with the models held whole or in pipeline stages.
//
// Note [RL in pipeline stages]: with pipeline.stages > 1 the actor trains as its model's
// list of layers and the critic as a value model's (nn/value_layers.h), each rank holding
// its stage (Note [RLHF pipeline stages] in rlhf/step_run.h). Generation and the experience
// run on the whole models, gathered from the stages on every rank of the pipeline (Note
// [Stages gathered whole] in rlhf/gathered_stages.h), so every rank of a pipeline holds the
// same samples and experience, which are one process's; the frozen reference and reward
// models are held on every rank, as without stages (Note [Frozen models] in rlhf/models.h:
// partitioned over the stage's data-parallel ranks at ZeRO-3). The stages of a pipeline
// thus repeat the generation and scoring of their rows rather than split it. An epoch then
// runs the step's micro-batches through each engine's schedule (Engine::forward_backward)
// with the loss on the last stage (Note [Pipeline losses] in engine/engine.h). A pipeline
// agrees on one activation shape for its whole run, and the stages pass one tensor, with no
// padding positions beside it, so each sequence goes in right-padded to `width` columns,
// the same at every step: a left-padded row's prompt and answer moved to its start, the pad
// token after them. A causal model computes at a row's tokens what it computes there
// left-padded (the row's positions count from its first token either way; equal up to
// rounding), so the losses read the log-probs and values of the answer tokens at each row's
// own columns. With ptx, a micro-batch's ptx rows (right-padded to the same width) follow
// its experience rows in the same input, and the loss adds unsup_coef times their
// language-model loss. The figures the losses record are read on the last stage once the
// schedules are queued, all micro-batches' in one wait (DeviceSum::read), and go from there
// to every rank of the pipeline. The actor's EMA (Note [Actor EMA]) needs nothing more: each rank
// averages its ZeRO shard of its stage's layers, which are named as the whole model's (Note
// [Layer names]).
#pragma once

#include <vector>

#include "engine/engine.h"
#include "nn/language_model.h"
#include "rlhf/log_probs.h"
#include "rlhf/preference_data.h"
#include "rlhf/rlhf_config.h"

namespace triad::rlhf {

// One micro-batch of the rank's rows, scored (Note [RL step]); all on the training device.
struct Experience {
  Tensor seq;                  // (R, P + N) i64: left-padded prompts, then the answers
  std::vector<int64_t> pads;   // row b's pad columns before its prompt
  nn::LeftPadding padding;     // of those pads
  Tensor mask;                 // (R, N) f32: 1 at answer tokens
  Tensor old_logp, ref_logp;   // (R, N)
  Tensor advantages;           // PPO (R, N); GRPO (R,)
  Tensor old_values, returns;  // PPO (R, N)
  double tokens = 0;           // sum(mask): the losses' divisor, known without a read of the device
};

// What an epoch reads besides the engines.
struct EpochData {
  const std::vector<Experience>& experience;  // gradient_accumulation_steps micro-batches
  const std::vector<SftBatch>& ptx;           // the same count of ptx batches, or none
  bool ppo = true;
  const RlOptions& options;
  int64_t vocab = 0;             // the actor's (unpadded) vocabulary
  parallel::CommunicatorPtr tp;  // the models' tensor-parallel group
  int64_t width = 0;             // in pipeline stages: every input's columns,
  int32_t pad_token = 0;         // and what pads them
};

// A sum of figures of shape () kept where they were computed, read once: reading a
// device's value waits for it, so a step adds its micro-batches' figures without waiting
// and reads them when it reports.
class DeviceSum {
 public:
  void add(const Tensor& x);  // shape (), any device; no gradient flows
  void add(double x);
  double read() const;
  // The values of `sums`, in order, each what its read() gives, read in one wait (their
  // parts on the device gathered there: host_values); none is read when none has any.
  static std::vector<double> read(const std::vector<const DeviceSum*>& sums);

 private:
  Tensor device_;  // undefined: nothing on a device yet
  double host_ = 0;
};

// The figures of epochs, summed over the rank's micro-batches.
struct EpochFigures {
  DeviceSum actor_loss, clip_fraction, approx_kl, ptx_loss, critic_loss, value_clip;
  // All six, in the order above (for DeviceSum::read).
  std::vector<const DeviceSum*> all() const {
    return {&actor_loss, &clip_fraction, &approx_kl, &ptx_loss, &critic_loss, &value_clip};
  }
};

// The answer part (R, N) of the next-token log-probs and entropy of rows whose answers
// start at column P (the position before predicts each answer token).
TokenLogProbs answer_log_probs(const Tensor& logits, const Tensor& seq, int64_t P, int64_t N, int64_t vocab);

// Back-propagates one epoch's losses into the actor and (PPO) the critic (null for GRPO),
// adding its figures to `figures`: collective over each engine's pipeline group in pipeline
// stages. The caller then steps the optimizers.
void train_epoch(engine::Engine& actor, engine::Engine* critic, const EpochData& data, EpochFigures& figures);

}  // namespace triad::rlhf
