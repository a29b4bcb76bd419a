// triad-estimate's per-rank memory of a pp × dp × tp layout of a config's GPT: for each
// pipeline stage of the cut pipeline.partition gives (nn/pipeline_partition.h), the model
// states under the ZeRO stage over dp (estimate/model_states.h, the tp-split sizes of
// GPTConfig::parameter_sizes; the tied token table on every stage holding the embedding or
// the head), and the activations: one micro-batch of each chunk (estimate/activation_bytes.h)
// weighed over the schedule's action list (estimate/pipeline_memory.h).
//
// What a stage's micro-batch keeps follows the code that runs it:
//   pp > 1  PipelineStage (nn/layer_list.h): its layers' bytes; with
//           pipeline.activation_checkpoint_interval k, each run of k layers keeps only its
//           input (one residual tensor; the embedding, whose input is token ids, runs
//           plainly; the head runs plainly after the runs, with its fused loss: Note
//           [Fused head loss] in nn/layer_list.h). Every chunk but the last virtual
//           stage holds its output until its backward. model.activation_checkpointing has
//           no effect here (it belongs to nn::GPT).
//   pp = 1  nn::GPT, one micro-batch at a time: its layers' bytes, or, with
//           model.activation_checkpointing, each block only its input.
// Recomputing adds, once per rank, the largest run's bytes while it is replayed. Transients inside one pass (the
// gradients a backward makes as it goes) are not counted. The
// executor's sends (Note [Pipeline messages]) keep a micro-batch's activation and input
// gradient until the next stage takes it; the bound, all m residual tensors each way
// undelivered, is counted apart as "p2p buffers". Model states as estimate/model_states.h,
// 16-bit parameters and gradients and K bytes of optimizer state per parameter.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "estimate/activation_bytes.h"
#include "estimate/layout_config.h"
#include "estimate/model_states.h"
#include "estimate/pipeline_memory.h"
#include "nn/layer_list.h"

namespace triad::estimate {

struct StageMemory {
  int rank = 0;
  std::vector<nn::LayerRange> chunks;  // layer ranges: 0 embedding, 1..L blocks, L + 1 head
  int blocks = 0;
  bool embedding = false, head = false;
  double params = 0;  // on one tp rank, the tied token table once
  PersistentParams persistent;
  ModelStateBytes states;
  std::vector<ChunkBytes> micro_batch;  // per chunk
  int peak_live = 0;                    // peak_live_micro_batches
  double activations = 0;               // peak_activation_bytes
  double recompute = 0, send_buffers = 0;
  double flops_per_token = 0;  // this stage's share of 6N + 6LCT on one tp rank
  double total() const { return states.total() + activations + recompute + send_buffers; }
};

struct LayoutMemory {
  LayoutRequest layout;
  int64_t seq = 0;
  double k = kAdamMixedPrecisionBytes;
  int64_t threshold = kDefaultPersistenceThreshold;
  std::string partition, checkpointing;
  parallel::PipeSchedule schedule = parallel::PipeSchedule::one_f_one_b;
  std::vector<int> bounds;  // of the virtual stages
  ActivationShape shape;
  double residual = 0;  // bytes of one activation between stages
  double bubble = 0;    // theoretical_bubble, F = I = W
  std::vector<StageMemory> stages;
  std::vector<std::string> notes;
};

// config: resolve_layout's for `layout`. seq: tokens per sequence (0: model.seq_len).
LayoutMemory estimate_layout_memory(const engine::TrainConfig& config, const LayoutRequest& layout, int64_t seq,
                                    double k, int64_t threshold);
// Prints the per-stage table and returns its JSON.
nlohmann::json print_layout_memory(const LayoutMemory&);

}  // namespace triad::estimate
