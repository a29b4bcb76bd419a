// The training configuration: one JSON file in the spirit of DeepSpeed's ds_config, with
// DeepSpeed's key names where a key means the same thing. parse_config validates every key
// (unknown keys are errors with the closest known key suggested) and resolves the batch
// sizes. The JSON itself is kept, resolved, so runs can record exactly what they ran.
//
//   {
//     "model": {"arch": "gpt2", "n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 128,
//               "vocab_size": 4096, "make_vocab_size_divisible_by": 1, "dropout": 0.0,
//               "activation_checkpointing": false},
//       or {"arch": "llama", "n_layer": 4, "n_head": 8, "n_kv_head": 2, "d_model": 128,
//           "intermediate_size": 344, "seq_len": 128, "vocab_size": 4096,
//           "rms_norm_eps": 1e-5, "rope_theta": 10000.0}   (n_kv_head: n_head when absent)
//     "data": {"corpus": "tokens.bin", "tokenizer": "tokenizer.json", "val_fraction": 0.05},
//     "train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,   (any two of these three
//     "gradient_accumulation_steps": 2,                                 determine the third)
//     "steps": 1000,
//     "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
//                                                "weight_decay": 0.1}},
//     "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 100,   (DeepSpeed's:
//                   "warmup_type": "linear", "cos_min_ratio": 0.1}},   SchedulerConfig below)
//     "gradient_clipping": 1.0, "seed": 1234, "eval_interval": 100, "eval_iters": 10,
//     "log_interval": 1, "device": "cpu", "distributed_backend": "auto", "output_dir": "runs/demo",
//     "zero_optimization": {"stage": 1, "overlap_comm": true,   (under mpirun: ZeRO over the ranks)
//                           "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8,
//                           "contiguous_gradients": true, "stage3_prefetch_bucket_size": 5e7,
//                           "stage3_param_persistence_threshold": 1e5},
//     "checkpoint": {"dir": "runs/demo/checkpoints", "every": 100, "keep": 3},
//     "bf16": {"enabled": true}   or   "fp16": {"enabled": true, "initial_scale_power": 16,
//              "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
//     "cluster": {"ranks_per_node": 8, "cores_per_node": 0, "flops_per_rank": 4e14,
//                 "background_progress": true,
//                 "intra_node": {"bandwidth_GBps": 900, "latency_us": 3},
//                 "inter_node": {"bandwidth_Gbps": 200, "latency_us": 5}}
//   }
// "cluster" describes the machine for the step-time model (estimate/perf_model.h: triad-estimate
// --time, triad-bench scaling). Training reads one key of it: ranks_per_node, when the config
// gives it, makes ZeRO++ see nodes of that many consecutive ranks (emulating several nodes on
// one machine); otherwise ZeRO++'s nodes are the machines MPI finds. A link's bandwidth is given in bytes
// (bandwidth_GBps) or bits (bandwidth_Gbps) per second, one of the two. background_progress
// says whether communication moves while ranks compute (NCCL on GPUs: true; MPI between
// CPU ranks without a progress thread: false), so whether overlap_comm can hide it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/compression_config.h"
#include "profiler/flops_profiler.h"
#include "monitor/monitor.h"
#include "nn/gpt.h"
#include "nn/layer_list.h"
#include "nn/llama.h"
#include "tensor/ops.h"
#include "zero/zero_config.h"
#include "estimate/perf_model.h"

namespace triad::engine {

struct OptimizerConfig {
  std::string type = "AdamW";  // AdamW | SGD
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.999;  // AdamW
  double eps = 1e-8;                  // AdamW
  double weight_decay = 0.0;          // AdamW: decoupled (L2 with adam_w_mode false), on matrices
                                      // and embeddings; SGD: L2
  bool adam_w_mode = true;            // DeepSpeed's Adam: false for L2 (type AdamW: always true)
  bool bias_correction = true;        // AdamW
  double momentum = 0.0;              // SGD
  bool nesterov = false;              // SGD
};

struct SchedulerConfig {
  // constant (triad's): the optimizer's lr throughout, after warmup_num_steps of linear
  // warmup if any. DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and
  // LRRangeTest: their parameters, defaults and formulas (optim/deepspeed_schedules.h);
  // total_num_steps defaults to the run's steps.
  std::string type = "constant";
  int64_t warmup_num_steps = 0;  // DeepSpeed's schedules: 1000 when absent, at least 1
  std::string warmup_type = "log";
  // warmup_max_lr when absent: WarmupLR's is the optimizer's lr, WarmupDecayLR's 0.001
  double warmup_min_lr = 0.0, warmup_max_lr = 0.001;
  int64_t total_num_steps = 0;
  double warmup_min_ratio = 0.0, cos_min_ratio = 0.0001;
  double cycle_min_lr = 0.0, cycle_max_lr = 0.0, decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000, decay_step_size = 0;
  std::optional<int64_t> cycle_second_step_size;  // none (null): cycle_first_step_size
  int64_t cycle_first_stair_count = 0;             // 0: no stairs
  std::optional<int64_t> cycle_second_stair_count;  // none (null): cycle_first_stair_count
  bool cycle_momentum = false;  // OneCycle (DeepSpeed's default true) sets Adam's betas; SGD has none
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0.0;
  double lr_range_test_min_lr = 0.001, lr_range_test_step_rate = 1.0;
  int64_t lr_range_test_step_size = 2000;
  bool lr_range_test_staircase = false;
};

// Mixed precision (DeepSpeed's "bf16" and "fp16" sections): parameters and gradients stored
// in 16 bits, f32 master weights and moments in the optimizer; activations and their
// gradients stored in the same 16-bit dtype, every kernel computing in f32 (Note [16-bit
// activations] in autograd/functions.cpp).
struct PrecisionConfig {
  DType dtype = DType::f32;      // f32, bf16 or f16
  int initial_scale_power = 16;  // fp16: the loss scale starts at 2^this
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;  // refill the hysteresis after every clean step
  double min_loss_scale = 1.0;
  double static_loss_scale = 0;  // fp16.loss_scale > 0: a static scale (0: dynamic)

  // The loss scale these settings ask for (dynamic in fp16 unless static; 1 otherwise).
  optim::LossScaleConfig loss_scale() const;
};

// Checkpoints (checkpoint/checkpoint_dir.h): dir/step-<N>.h5 every `every` steps and at the end,
// the newest `keep` kept (0: all). --save-dir overrides dir. A save that fails (full disk,
// I/O error, no permission) stops the run (`on_error` "stop") or is logged and recorded in
// the metrics while training goes on ("continue"); the previous checkpoint stays `latest`.
struct CheckpointConfig {
  std::string dir;    // "" : no checkpoints
  int64_t every = 0;  // 0: only at the end
  int64_t keep = 3;
  std::string on_error = "stop";  // "stop" | "continue"
};

struct DataConfig {
  std::string corpus;     // token file written by `triad-data encode`
  std::string tokenizer;  // tokenizer written by `triad-data tokenizer`
  double val_fraction = 0.05;
};

// Pipeline parallelism (DeepSpeed's "pipeline" section, plus the schedule): the model's
// layers (nn/gpt_layers.h) cut into `stages` parts, one per pipeline rank (or, interleaved,
// virtual_stages chunks per rank); a step pushes gradient_accumulation_steps micro-batches
// through them. Layout: Note [Rank layout] in parallel/process_grid.h, pp outermost.
struct PipelineConfig {
  int stages = 1;
  std::string partition = "parameters";  // uniform | parameters | type:REGEX (nn/pipeline_partition.h)
  int activation_checkpoint_interval = 0;  // recompute runs of this many layers (0: off)
  std::string schedule = "1f1b";           // gpipe | 1f1b | interleaved | zb_h1
  int virtual_stages = 1;                  // chunks per rank (interleaved)
};

// A training step recorded once as a CUDA graph and replayed (Note [Recorded steps] in
// engine/step_recording.h); Megatron-core's enable_cuda_graph with cuda_graph_scope
// full_iteration, and its cuda_graph_warmup_steps.
struct CudaGraphConfig {
  bool enabled = false;
  int64_t warmup_steps = 3;  // steps run plainly before the recording
};

struct TrainConfig {
  std::string arch = "gpt2";  // model.arch: which of the two below describes the model
  nn::GPTConfig model;        // arch "gpt2"
  nn::LlamaConfig llama;      // arch "llama" (config/model_factory.h builds either)
  // Megatron-LM's tensor (and sequence) parallelism: model.tensor_parallel ranks split every
  // layer (DeepSpeed's tensor_parallel.autotp_size says the same); the job's other factor
  // is data-parallel (data_parallel = ranks / tensor_parallel).
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  // DeepSpeed-MoE's ep (model.moe.expert_parallel_size): the ranks of a data-parallel group
  // that split each MoE layer's experts between them.
  int64_t expert_parallel = 1;
  int64_t data_parallel = 1;
  PipelineConfig pipeline;
  DataConfig data;
  int64_t train_batch_size = 0;  // sequences per optimizer step, over all data-parallel ranks
  int64_t micro_batch_size = 0;  // sequences per forward on one rank
  int64_t gradient_accumulation_steps = 0;
  int64_t steps = 0;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  // The zero_optimization section, as ZeRO takes it. DeepSpeed's ZeRO++ keys
  // zero_quantized_weights, zero_hpz_partition_size and zero_quantized_gradients, and
  // triad's zeropp_quantization_block and zeropp_gradient_quantization_block, fill
  // quantized_weights, hpz_partition_size, quantized_gradients and the two blocks;
  // triad's delayed_update {enabled, warmup_steps} fills delayed_update (Note [Delayed
  // parameter update] in zero/zero_optimizer.h); contiguous_gradients is accepted at its
  // default, true. Its dtype, loss_scale,
  // gradient_predivide_factor and defer_reduction are not read from the section: the Engine
  // sets them from precision, the gradient keys below and the pipeline (Engine::zero_config).
  zero::ZeroConfig zero;
  PrecisionConfig precision;
  double gradient_clipping = 0.0;  // 0: off
  // DeepSpeed's: gradients divided by the data-parallel ranks before they are reduced
  // (prescale_gradients), else by gradient_predivide_factor before and the rest after
  // (zero::ZeroConfig::gradient_predivide_factor). communication_data_type and
  // data_types.grad_accum_dtype must name the gradients' storage type (fp32, or the
  // 16-bit type of bf16/fp16 training): triad reduces and accumulates them in it.
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  // Seconds a rank waits in a collective or message before it reports what it waits for
  // and aborts the job (Note [Collective deadline], parallel/watchdog.h); 0: no deadline.
  // PyTorch's NCCL default.
  double comm_timeout = 600.0;
  uint64_t seed = 1234;
  int64_t eval_interval = 0;  // 0: evaluate only at the end
  int64_t eval_iters = 10;
  int64_t log_interval = 1;    // DeepSpeed's steps_per_print says the same
  bool wall_clock_breakdown = false;  // DeepSpeed's: forward/backward/step ms on each log line
  MonitorConfig csv_monitor;          // DeepSpeed's csv_monitor (monitor/csv_monitor.h)
  MonitorConfig tensorboard;          // DeepSpeed's tensorboard (monitor/tensorboard_monitor.h)
  FlopsProfilerConfig flops_profiler;  // DeepSpeed's flops_profiler (profiler/flops_profiler.h)
  CompressionConfig compression;       // DeepSpeed's compression_training (config/compression_config.h)
  CudaGraphConfig cuda_graph;
  // One line each for keys accepted that change nothing in triad (and why); printed by
  // train() on rank 0.
  std::vector<std::string> notices;
  std::string device = "cpu";  // cpu, cuda (each rank's own GPU) or cuda:N: engine.h, training_device
  // What ZeRO's collectives run over: auto, mpi or nccl (Megatron's --distributed-backend):
  // engine.h, resolve_distributed_backend.
  std::string distributed_backend = "auto";
  std::string output_dir;  // where the trained weights go, as output_dir/model.h5 ("" : not saved)
  CheckpointConfig checkpoint;
  // The machine the step-time model describes (defaults: estimate::Cluster's 8-GPU node).
  estimate::Cluster cluster;
  int64_t emulated_ranks_per_node = 0;  // cluster.ranks_per_node when the config gives it, else 0
  nlohmann::json json;  // the configuration as parsed, with batch sizes resolved
};

// Reads a JSON config file; Error naming the path when missing or not valid JSON.
nlohmann::json load_config_file(const std::string& path);
// A DeepSpeed config file (ds_config.json, `triad-train --deepspeed`) joined to triad's config:
// objects merge key by key; a value given in both files must be the same there (else an
// Error naming the dotted key, both values and both paths), unless it is "auto" in one of
// them, which takes the other's value. "auto" left over is HF Trainer's, which parse_config
// fills in (config/auto_values.h).
nlohmann::json merge_deepspeed_config(const nlohmann::json& config, const std::string& config_path,
                                      const nlohmann::json& deepspeed, const std::string& deepspeed_path);
// Applies "dotted.key=value" to the JSON: value is parsed as JSON when it is valid JSON,
// else taken as a string; missing objects on the way are created.
void apply_override(nlohmann::json& config, const std::string& assignment);
// Validates and resolves for a job of `ranks` processes: data_parallel = ranks /
// (tensor_parallel x pipeline.stages), and train_batch_size = micro x accumulation x data_parallel.
TrainConfig parse_config(const nlohmann::json& config, int64_t ranks = 1);
// The same for a model given as a list of layers (the Engine's LayerList constructor, Note
// [User layer lists] in engine/engine.h): pipeline.partition must cut `layers` (not the
// GPT the model section describes) into pipeline.stages x pipeline.virtual_stages parts.
TrainConfig parse_config(const nlohmann::json& config, int64_t ranks, const nn::LayerList& layers);

}  // namespace triad::engine
