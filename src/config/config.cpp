#include "config/config.h"

#include <cmath>
#include <fstream>
#include <limits>

#include "config/auto_values.h"
#include "config/json_reader.h"
#include "config/model_factory.h"
#include "config/moe_keys.h"
#include "nn/pipeline_partition.h"
#include "parallel/pipeline_schedule.h"
#include "tensor/device.h"
#include "tensor/error.h"

namespace triad::engine {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

void parse_gpt(JsonReader& r, nn::GPTConfig& m, int64_t& expert_parallel_size) {
  m.n_layer = r.integer("n_layer", m.n_layer, 1, 1024);
  m.n_head = r.integer("n_head", m.n_head, 1, 1024);
  m.d_model = r.integer("d_model", m.d_model, 1, 1 << 16);
  m.seq_len = r.integer("seq_len", m.seq_len, 1, 1 << 20);
  m.vocab_size = r.integer("vocab_size", m.vocab_size, 1, 1 << 24);
  m.vocab_multiple = r.integer("make_vocab_size_divisible_by", m.vocab_multiple, 1, 1 << 16);
  m.dropout = r.number("dropout", m.dropout, 0.0, 0.999);
  m.activation_checkpointing = r.boolean("activation_checkpointing", m.activation_checkpointing);
  if (r.has("moe")) m.moe = parse_moe(r.object("moe"), expert_parallel_size);
}

// The keys Hugging Face's LlamaConfig has keep its names (intermediate_size, rms_norm_eps,
// rope_theta); n_kv_head, its num_key_value_heads, is n_head when absent, as there.
void parse_llama(JsonReader& r, nn::LlamaConfig& m, int64_t& expert_parallel_size) {
  m.n_layer = r.integer("n_layer", m.n_layer, 1, 1024);
  m.n_head = r.integer("n_head", m.n_head, 1, 1024);
  m.n_kv_head = r.integer("n_kv_head", m.n_head, 1, 1024);
  m.d_model = r.integer("d_model", m.d_model, 1, 1 << 16);
  m.intermediate = r.integer("intermediate_size", m.intermediate, 1, 1 << 20);
  m.seq_len = r.integer("seq_len", m.seq_len, 1, 1 << 20);
  m.vocab_size = r.integer("vocab_size", m.vocab_size, 1, 1 << 24);
  m.rms_eps = r.number("rms_norm_eps", m.rms_eps, 1e-30, 1.0);
  m.rope_theta = r.number("rope_theta", m.rope_theta, 1.0, 1e12);
  if (r.has("moe")) m.moe = parse_moe(r.object("moe"), expert_parallel_size);
}

void parse_model(JsonReader r, TrainConfig& c) {
  c.arch = r.choice("arch", "gpt2", {"gpt2", "llama"});
  if (c.arch == "llama")
    parse_llama(r, c.llama, c.expert_parallel);
  else
    parse_gpt(r, c.model, c.expert_parallel);
  c.tensor_parallel = int(r.integer("tensor_parallel", 1, 1, 1 << 16));
  c.sequence_parallel = r.boolean("sequence_parallel", false);
  r.finish();
  const int64_t C = c.arch == "llama" ? c.llama.d_model : c.model.d_model;
  const int64_t NH = c.arch == "llama" ? c.llama.n_head : c.model.n_head;
  TRIAD_CHECK(C % NH == 0, "[config] model.d_model (" << C << ") must be a multiple of model.n_head (" << NH << ")");
  if (c.arch != "llama") return;
  const nn::LlamaConfig& m = c.llama;
  TRIAD_CHECK(m.n_head % m.n_kv_head == 0,
              "[config] model.n_kv_head (" << m.n_kv_head << ") must divide model.n_head (" << m.n_head << ")");
  TRIAD_CHECK((C / NH) % 2 == 0, "[config] model.d_model / model.n_head (" << C / NH
                                                                          << ") must be even for rotary positions");
}

void parse_data(JsonReader r, DataConfig& d) {
  d.corpus = r.string("corpus", "");
  d.tokenizer = r.string("tokenizer", "");
  d.val_fraction = r.number("val_fraction", d.val_fraction, 0.0, 0.5);
  r.finish();
}

void parse_optimizer(JsonReader r, OptimizerConfig& o, std::vector<std::string>& notices) {
  o.type = r.choice("type", o.type, {"AdamW", "Adam", "SGD"});
  const bool adam = o.type == "Adam";
  JsonReader p = r.object("params");
  r.finish();
  o.lr = p.number("lr", o.lr, 0.0, 10.0);
  o.weight_decay = p.number("weight_decay", o.weight_decay, 0.0, 10.0);
  if (o.type != "SGD") {
    // DeepSpeed's Adam is AdamW (decoupled weight decay) unless adam_w_mode is false: then the
    // decay is an L2 term in the gradient. Its AdamW decouples whatever adam_w_mode says.
    const bool w_mode = p.boolean("adam_w_mode", true);
    o.adam_w_mode = w_mode || !adam;
    if (!w_mode && !adam)
      notices.push_back(
          "optimizer.params.adam_w_mode: type AdamW always decouples the weight decay (type Adam with "
          "adam_w_mode false is L2)");
    o.bias_correction = p.boolean("bias_correction", true);
    if (p.has("torch_adam")) {
      p.boolean("torch_adam", false);
      notices.push_back("optimizer.params.torch_adam: triad has one Adam implementation, its own fused kernel");
    }
    if (adam) o.type = "AdamW";
  }
  if (o.type == "AdamW") {
    const std::vector<double> betas = p.numbers("betas", {o.beta1, o.beta2}, 2, 0.0, 0.999999);
    o.beta1 = betas[0], o.beta2 = betas[1];
    o.eps = p.number("eps", o.eps, 1e-30, 1.0);
  } else {
    o.momentum = p.number("momentum", o.momentum, 0.0, 0.999999);
    o.nesterov = p.boolean("nesterov", o.nesterov);
  }
  p.finish();
}

// An optional integer: absent or null (DeepSpeed's None) gives none.
std::optional<int64_t> optional_count(JsonReader& r, const std::string& key, int64_t min) {
  if (r.has(key) && r.value(key).is_null()) {
    r.known(key);
    return std::nullopt;
  }
  return r.optional_integer(key, min, kMaxInt);
}

// DeepSpeed's schedules with its parameter names and defaults (deepspeed.runtime.lr_schedules);
// `lr` is the optimizer's (WarmupLR's warmup_max_lr when absent).
void parse_scheduler(JsonReader r, SchedulerConfig& s, double lr) {
  s.type = r.choice("type", s.type, {"constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle",
                                     "LRRangeTest"});
  JsonReader p = r.object("params");
  r.finish();
  if (p.has("last_batch_iteration") && p.integer("last_batch_iteration", -1, -1, kMaxInt) != -1)
    p.fail("last_batch_iteration", "-1: a run resumes its schedule from its checkpoint's step");
  const bool warmup = s.type == "WarmupLR" || s.type == "WarmupDecayLR" || s.type == "WarmupCosineLR";
  if (s.type == "constant") s.warmup_num_steps = p.integer("warmup_num_steps", 0, 0, kMaxInt);
  if (warmup) s.warmup_num_steps = p.integer("warmup_num_steps", 1000, 1, kMaxInt);
  if (warmup) s.warmup_type = p.choice("warmup_type", s.warmup_type, {"log", "linear"});
  if (s.type == "WarmupLR" || s.type == "WarmupDecayLR") {
    s.warmup_min_lr = p.number("warmup_min_lr", s.warmup_min_lr, 0.0, kInf);
    s.warmup_max_lr = p.number("warmup_max_lr", s.type == "WarmupLR" ? lr : s.warmup_max_lr, 0.0, kInf);
  }
  if (s.type == "WarmupDecayLR" || s.type == "WarmupCosineLR")
    s.total_num_steps = p.integer("total_num_steps", s.total_num_steps, 0, kMaxInt);
  if (s.type == "WarmupCosineLR") {
    s.warmup_min_ratio = p.number("warmup_min_ratio", s.warmup_min_ratio, 0.0, 1.0);
    s.cos_min_ratio = p.number("cos_min_ratio", s.cos_min_ratio, 0.0, 1.0);
  }
  if (s.type == "OneCycle") {
    TRIAD_CHECK(p.has("cycle_min_lr") && p.has("cycle_max_lr"),
                "[config] scheduler OneCycle needs params.cycle_min_lr and params.cycle_max_lr");
    s.cycle_min_lr = p.number("cycle_min_lr", 0.0, 0.0, kInf);
    s.cycle_max_lr = p.number("cycle_max_lr", 0.0, 0.0, kInf);
    s.decay_lr_rate = p.number("decay_lr_rate", s.decay_lr_rate, 0.0, kInf);
    s.cycle_first_step_size = p.integer("cycle_first_step_size", s.cycle_first_step_size, 1, kMaxInt);
    s.cycle_second_step_size = optional_count(p, "cycle_second_step_size", 0);
    s.cycle_first_stair_count = p.integer("cycle_first_stair_count", 0, 0, kMaxInt);
    s.cycle_second_stair_count = optional_count(p, "cycle_second_stair_count", 0);
    s.decay_step_size = p.integer("decay_step_size", s.decay_step_size, 0, kMaxInt);
    s.cycle_momentum = p.boolean("cycle_momentum", true);
    s.cycle_min_mom = p.number("cycle_min_mom", s.cycle_min_mom, 0.0, 0.999999);
    s.cycle_max_mom = p.number("cycle_max_mom", s.cycle_max_mom, 0.0, 0.999999);
    s.decay_mom_rate = p.number("decay_mom_rate", s.decay_mom_rate, 0.0, kInf);
  }
  if (s.type == "LRRangeTest") {
    s.lr_range_test_min_lr = p.number("lr_range_test_min_lr", s.lr_range_test_min_lr, 0.0, kInf);
    s.lr_range_test_step_size = p.integer("lr_range_test_step_size", s.lr_range_test_step_size, 1, kMaxInt);
    s.lr_range_test_step_rate = p.number("lr_range_test_step_rate", s.lr_range_test_step_rate, 0.0, kInf);
    s.lr_range_test_staircase = p.boolean("lr_range_test_staircase", s.lr_range_test_staircase);
  }
  p.finish();
}

// DeepSpeed's ZeRO keys whose settings change nothing in triad, and why.
const std::vector<std::pair<std::string, std::string>> kZeroKeysWithoutEffect = {
    {"reduce_scatter", "triad reduces gradients with reduce-scatter at stages 1-3 and all-reduce at 0, whatever it says"},
    {"allgather_partitions", "triad gathers the updated partitions with all-gather, whatever it says"},
    {"stage3_max_live_parameters", "triad keeps one unit gathered ahead; stage3_prefetch_bucket_size bounds it"},
    {"stage3_max_reuse_distance", "triad releases each unit after its use and gathers it again for the backward"},
    {"stage3_gather_16bit_weights_on_model_save", "triad always saves whole weights (output_dir/model.h5)"},
    {"round_robin_gradients", "triad's gradient shards are contiguous ranges of one flat buffer per group"},
    {"ignore_unused_parameters", "every parameter of triad's models takes part in every step"},
    {"load_from_fp32_weights", "triad's checkpoints restore the f32 master weights themselves"},
    {"elastic_checkpoint", "triad's checkpoints load on any grid (layout-free HDF5)"},
    {"zero_quantized_nontrainable_weights", "every parameter of triad's models is trained (qwZ covers them all)"},
};
// ZeRO features triad has not built yet, with the value that leaves each off in DeepSpeed.
const std::vector<std::pair<std::string, nlohmann::json>> kZeroKeysNotAvailable = {{"mics_shard_size", -1}};

// Whether a DeepSpeed value leaves its feature off: the off value itself, or (offload) a
// device of "none".
bool is_off(const nlohmann::json& value, const nlohmann::json& off) {
  return value == off || (value.is_object() && value.value("device", "") == "none");
}

// DeepSpeed's offload_optimizer section (null: off). Which stages take it, and the folder
// nvme needs, are ZeroConfig::validate's rules.
void parse_offload_optimizer(JsonReader& zero, zero::OffloadConfig& o, std::vector<std::string>& notices) {
  if (!zero.has("offload_optimizer")) return;
  if (zero.value("offload_optimizer").is_null()) return zero.known("offload_optimizer");
  JsonReader r = zero.object("offload_optimizer");
  const std::string device = r.choice("device", "none", {"none", "cpu", "nvme"});
  o.device = device == "nvme" ? zero::OffloadDevice::nvme : device == "cpu" ? zero::OffloadDevice::cpu : zero::OffloadDevice::none;
  if (r.has("nvme_path") && r.value("nvme_path").is_null())
    r.known("nvme_path");
  else
    o.nvme_path = r.string("nvme_path", o.nvme_path);
  o.buffer_count = r.integer("buffer_count", o.buffer_count, 1, kMaxInt);
  o.ratio = r.number("ratio", o.ratio, 0.0, 1.0);
  o.pipeline_read = r.boolean("pipeline_read", o.pipeline_read);
  o.pipeline_write = r.boolean("pipeline_write", o.pipeline_write);
  const std::string at = r.dotted("");
  if (r.has("pin_memory")) {
    o.pin_memory = r.boolean("pin_memory", o.pin_memory);
    // Device cpu on a GPU pins the host state (zero/host_shard_store.h); nvme's buffers are for direct I/O.
    if (o.device == zero::OffloadDevice::nvme)
      notices.push_back(at + "pin_memory: triad's swap buffers are page-aligned host memory for direct I/O; they "
                             "are not registered with a GPU driver");
  }
  if (r.has("fast_init")) {
    o.fast_init = r.boolean("fast_init", o.fast_init);
    notices.push_back(at + "fast_init: triad sets the offloaded state up once at start-up (with \"nvme\", each "
                           "sub-group's initial state written to its file once), whatever it says");
  }
  r.finish();
}

// DeepSpeed's offload_param section (null or device "none": off). Device "cpu" keeps stage
// 3's parameter shards in host memory on a GPU, and changes nothing on a CPU training device
// (the returned flag asks parse for the notice, which needs the device); "nvme" swaps them
// to files. Which stage takes it, and the folder nvme needs, are ZeroConfig::validate's rules.
bool parse_offload_param(JsonReader& zero, zero::ParamOffloadConfig& o, std::vector<std::string>& notices) {
  if (!zero.has("offload_param")) return false;
  if (zero.value("offload_param").is_null()) {
    zero.known("offload_param");
    return false;
  }
  JsonReader r = zero.object("offload_param");
  const std::string device = r.choice("device", "none", {"none", "cpu", "nvme"});
  o.device = device == "nvme" ? zero::OffloadDevice::nvme : device == "cpu" ? zero::OffloadDevice::cpu : zero::OffloadDevice::none;
  if (r.has("nvme_path") && r.value("nvme_path").is_null())
    r.known("nvme_path");
  else
    o.nvme_path = r.string("nvme_path", o.nvme_path);
  o.buffer_count = r.integer("buffer_count", o.buffer_count, 1, kMaxInt);
  o.buffer_size = r.integer("buffer_size", o.buffer_size, 1, kMaxInt);
  const std::string at = r.dotted("");
  if (r.has("pin_memory")) {
    o.pin_memory = r.boolean("pin_memory", o.pin_memory);
    // Device cpu on a GPU pins the host shards (zero/param_host_backend.h); nvme's buffers are for direct I/O.
    if (o.device == zero::OffloadDevice::nvme)
      notices.push_back(at + "pin_memory: triad's swap buffers are page-aligned host memory for direct I/O; they "
                             "are not registered with a GPU driver");
  }
  if (r.has("max_in_cpu")) {
    o.max_in_cpu = r.integer("max_in_cpu", o.max_in_cpu, 0, kMaxInt);
    notices.push_back(at + "max_in_cpu: with device \"cpu\" triad keeps every parameter shard in host memory, and "
                           "with \"nvme\" only buffer_count buffers");
  }
  r.finish();
  return o.device == zero::OffloadDevice::cpu;
}

void parse_zero(JsonReader r, zero::ZeroConfig& z, std::vector<std::string>& notices, bool& host_parameters) {
  z.stage = int(r.integer("stage", z.stage, 0, 3));
  parse_offload_optimizer(r, z.offload_optimizer, notices);
  z.sub_group_size = r.integer("sub_group_size", z.sub_group_size, 1, kMaxInt);
  const zero::OffloadConfig& o = z.offload_optimizer;
  if (r.has("sub_group_size") && o.device != zero::OffloadDevice::nvme &&
      !(o.device == zero::OffloadDevice::cpu && o.ratio < 1.0))
    notices.push_back(
        "zero_optimization.sub_group_size: the unit in which optimizer state moves to and from NVMe, "
        "or (offload_optimizer.ratio below 1) stays on the device or goes to the host; otherwise each "
        "flat group is updated whole");
  host_parameters = parse_offload_param(r, z.offload_param, notices);
  if (r.has("delayed_update")) {  // triad's (Note [Delayed parameter update] in zero/zero_optimizer.h)
    JsonReader d = r.object("delayed_update");
    z.delayed_update.enabled = d.boolean("enabled", z.delayed_update.enabled);
    z.delayed_update.warmup_steps = d.integer("warmup_steps", z.delayed_update.warmup_steps, 0, kMaxInt);
    d.finish();
  }
  for (const auto& [key, why] : kZeroKeysWithoutEffect)
    if (r.has(key)) {
      r.known(key);
      notices.push_back("zero_optimization." + key + ": " + why);
    }
  for (const auto& [key, off] : kZeroKeysNotAvailable) {
    if (!r.has(key)) continue;
    r.known(key);
    TRIAD_CHECK(is_off(r.value(key), off), "[config] zero_optimization."
                                               << key << ": this DeepSpeed feature is not available in triad yet ("
                                               << off.dump() << " leaves it off)");
  }
  z.overlap_comm = r.boolean("overlap_comm", z.overlap_comm);
  z.reduce_bucket_size = r.integer("reduce_bucket_size", z.reduce_bucket_size, 1, kMaxInt);
  z.allgather_bucket_size = r.integer("allgather_bucket_size", z.allgather_bucket_size, 1, kMaxInt);
  if (!r.boolean("contiguous_gradients", true))
    r.fail("contiguous_gradients", "true: gradients always live in one flat buffer per parameter group");
  z.stage3_param_persistence_threshold =
      r.integer("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold, 0, kMaxInt);
  z.stage3_prefetch_bucket_size = r.integer("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, 0, kMaxInt);
  z.quantized_weights = r.boolean("zero_quantized_weights", z.quantized_weights);
  z.hpz_partition_size = int(r.integer("zero_hpz_partition_size", z.hpz_partition_size, 1, kMaxInt));
  z.quantized_gradients = r.boolean("zero_quantized_gradients", z.quantized_gradients);
  z.weight_quantization_block = r.integer("zeropp_quantization_block", z.weight_quantization_block, 1, kMaxInt);
  z.gradient_quantization_block =
      r.integer("zeropp_gradient_quantization_block", z.gradient_quantization_block, 2, kMaxInt);
  r.finish();
}

// DeepSpeed's sections for features triad does not have.
const std::vector<std::pair<std::string, std::string>> kDeepSpeedFeaturesNotAvailable = {
    {"wandb", "Weights & Biases monitor (csv_monitor and tensorboard are)"},
    {"comet", "Comet monitor (csv_monitor and tensorboard are)"},
    {"sparse_attention", "sparse attention"},
    {"elasticity", "elastic training"},
    {"autotuning", "autotuner"},
    {"data_efficiency", "data efficiency library"},
    {"curriculum_learning", "curriculum learning"},
    {"hybrid_engine", "hybrid engine"},
    {"amp", "Apex AMP (fp16 and bf16 are)"},
};

// DeepSpeed's aio section: how swap files are read and written (offload to NVMe).
void parse_aio(JsonReader r, io::AioConfig& a) {
  a.block_size = r.integer("block_size", a.block_size, 1, kMaxInt);
  a.queue_depth = r.integer("queue_depth", a.queue_depth, 1, kMaxInt);
  if (r.has("intra_op_parallelism") && r.has("thread_count"))
    r.fail("thread_count", "absent when intra_op_parallelism is given (its older name)");
  a.intra_op_parallelism = r.has("thread_count") ? r.integer("thread_count", 1, 1, kMaxInt)
                                                 : r.integer("intra_op_parallelism", a.intra_op_parallelism, 1, kMaxInt);
  a.single_submit = r.boolean("single_submit", a.single_submit);
  a.overlap_events = r.boolean("overlap_events", a.overlap_events);
  if (r.boolean("use_gds", false))
    r.fail("use_gds", "false (triad has no GPUDirect Storage: swap files move through host memory)");
  r.finish();
}

void parse_monitor(JsonReader r, MonitorConfig& m) {
  m.enabled = r.boolean("enabled", m.enabled);
  m.output_path = r.string("output_path", m.output_path);
  m.job_name = r.string("job_name", m.job_name);
  TRIAD_CHECK(!m.job_name.empty(), "[config] " << r.dotted("job_name") << " must not be empty");
  r.finish();
}

// communication_data_type and data_types.grad_accum_dtype, DeepSpeed's names for the type
// gradients are reduced and accumulated in: in triad, their storage type.
void parse_gradient_dtypes(JsonReader& r, DType storage) {
  const std::string name = storage == DType::bf16 ? "bf16" : storage == DType::f16 ? "fp16" : "fp32";
  const std::string why = storage == DType::f32 ? "" : std::string(" under ") + name + ".enabled";
  if (r.has("communication_data_type") &&
      r.choice("communication_data_type", name, {"fp32", "fp16", "bf16"}) != name)
    r.fail("communication_data_type", "\"" + name + "\" (triad reduces gradients in their storage type, " + name +
                                          why + ")");
  JsonReader types = r.object("data_types");
  if (types.has("grad_accum_dtype") && types.choice("grad_accum_dtype", name, {"fp32", "fp16", "bf16"}) != name)
    types.fail("grad_accum_dtype", "\"" + name + "\" (triad accumulates gradients in their storage type, " + name +
                                       why + ")");
  types.finish();
}

// cuda_graph (Note [Recorded steps] in engine/step_recording.h), once the rest of the config
// is known: what the recorded step cannot hold is an error naming both keys.
void parse_cuda_graph(JsonReader r, TrainConfig& c) {
  CudaGraphConfig& g = c.cuda_graph;
  g.enabled = r.boolean("enabled", g.enabled);
  g.warmup_steps = r.integer("warmup_steps", g.warmup_steps, 1, kMaxInt);
  r.finish();
  if (!g.enabled) return;
  const auto refuse = [](bool conflict, const std::string& why) {
    TRIAD_CHECK(!conflict, "[config] cuda_graph.enabled: " << why);
  };
  refuse(c.data_parallel > 1 || c.tensor_parallel > 1 || c.pipeline.stages > 1,
         "a recorded step runs in one process (data_parallel " + std::to_string(c.data_parallel) +
             ", model.tensor_parallel " + std::to_string(c.tensor_parallel) + ", pipeline.stages " +
             std::to_string(c.pipeline.stages) + "); collectives in a recorded step are not built");
  refuse(c.optimizer.type != "AdamW", "optimizer.type " + c.optimizer.type + ": a recorded step runs AdamW");
  refuse(c.zero.offload_optimizer.device != zero::OffloadDevice::none ||
             c.zero.offload_param.device != zero::OffloadDevice::none,
         "zero_optimization.offload_optimizer and offload_param: an offloaded update runs on the host");
  refuse(c.zero.delayed_update.enabled, "zero_optimization.delayed_update runs the update on a thread of the host");
  refuse(c.model.dropout > 0 && c.arch == "gpt2",
         "model.dropout " + std::to_string(c.model.dropout) + ": a replay would repeat the recorded step's masks");
  refuse((c.arch == "llama" ? c.llama.moe : c.model.moe).enabled(),
         "model.moe: the experts' token counts change from step to step");
  refuse(c.wall_clock_breakdown || c.flops_profiler.enabled,
         "wall_clock_breakdown and flops_profiler time the phases of a step, which a replay runs as one");
  refuse(c.compression.quantizes() || c.compression.layer_reduction.enabled,
         "compression_training changes the model between steps");
  if (Device::parse(c.device).is_cpu())
    c.notices.push_back(
        "cuda_graph: on a CPU device the step runs as it would be recorded (its inputs in fixed "
        "buffers, Adam's constants read from memory), without a graph");
}

void parse_flops_profiler(JsonReader r, FlopsProfilerConfig& f) {
  f.enabled = r.boolean("enabled", f.enabled);
  f.profile_step = r.integer("profile_step", f.profile_step, 0, kMaxInt);
  f.module_depth = r.integer("module_depth", f.module_depth, -1, kMaxInt);
  f.top_modules = r.integer("top_modules", f.top_modules, 1, kMaxInt);
  f.detailed = r.boolean("detailed", f.detailed);
  if (r.has("output_file") && r.value("output_file").is_null())  // DeepSpeed's default: standard output
    r.known("output_file");
  else
    f.output_file = r.string("output_file", "");
  f.recompute_fwd_factor = r.number("recompute_fwd_factor", f.recompute_fwd_factor, 0.0, kInf);
  r.finish();
}

void parse_checkpoint(JsonReader r, CheckpointConfig& k) {
  k.dir = r.string("dir", k.dir);
  k.every = r.integer("every", k.every, 0, kMaxInt);
  k.keep = r.integer("keep", k.keep, 0, kMaxInt);
  k.on_error = r.choice("on_error", k.on_error, {"stop", "continue"});
  r.finish();
}

// One link: bandwidth in GB/s (bytes) or Gb/s (bits), latency in µs.
void parse_link(JsonReader r, estimate::Link& link) {
  if (r.has("bandwidth_GBps") && r.has("bandwidth_Gbps"))
    r.fail("bandwidth_Gbps", "absent when bandwidth_GBps is given (one bandwidth per link, in bytes or bits)");
  if (r.has("bandwidth_Gbps"))
    link.bandwidth = r.number("bandwidth_Gbps", 0.0, 1e-9, kInf) * 1e9 / 8;
  else
    link.bandwidth = r.number("bandwidth_GBps", link.bandwidth / 1e9, 1e-9, kInf) * 1e9;
  link.latency = r.number("latency_us", link.latency * 1e6, 0.0, kInf) * 1e-6;
  r.finish();
}

void parse_cluster(JsonReader r, estimate::Cluster& c) {
  c.ranks_per_node = r.integer("ranks_per_node", c.ranks_per_node, 1, kMaxInt);
  c.cores_per_node = r.integer("cores_per_node", c.cores_per_node, 0, kMaxInt);
  c.flops_per_rank = r.number("flops_per_rank", c.flops_per_rank, 0.0, kInf);
  c.background_progress = r.boolean("background_progress", c.background_progress);
  parse_link(r.object("intra_node"), c.intra_node);
  parse_link(r.object("inter_node"), c.inter_node);
  r.finish();
}

void parse_precision(JsonReader bf16, JsonReader fp16, PrecisionConfig& p, std::vector<std::string>& notices) {
  const bool use_bf16 = bf16.boolean("enabled", false);
  bf16.finish();
  const bool use_fp16 = fp16.boolean("enabled", false);
  p.initial_scale_power = int(fp16.integer("initial_scale_power", p.initial_scale_power, 0, 40));
  p.loss_scale_window = fp16.integer("loss_scale_window", p.loss_scale_window, 1, kMaxInt);
  p.hysteresis = int(fp16.integer("hysteresis", p.hysteresis, 1, 1000));
  p.consecutive_hysteresis = fp16.boolean("consecutive_hysteresis", p.consecutive_hysteresis);
  p.min_loss_scale = fp16.number("min_loss_scale", p.min_loss_scale, 1e-10, kInf);
  p.static_loss_scale = fp16.number("loss_scale", 0.0, 0.0, kInf);  // DeepSpeed: 0 = dynamic
  if (fp16.has("auto_cast")) {
    fp16.boolean("auto_cast", false);
    notices.push_back("fp16.auto_cast: the model's inputs are token ids, which have nothing to cast");
  }
  fp16.finish();
  TRIAD_CHECK(!(use_bf16 && use_fp16), "[config] bf16.enabled and fp16.enabled are both true; choose one");
  p.dtype = use_bf16 ? DType::bf16 : use_fp16 ? DType::f16 : DType::f32;
}

// Any two of (batch, micro, accumulation) determine the third: batch = micro x acc x dp.
void resolve_batch(JsonReader& r, TrainConfig& c, int64_t dp) {
  auto batch = r.optional_integer("train_batch_size", 1, kMaxInt);
  auto micro = r.optional_integer("train_micro_batch_size_per_gpu", 1, kMaxInt);
  auto acc = r.optional_integer("gradient_accumulation_steps", 1, kMaxInt);
  if (batch && micro && acc) {
    TRIAD_CHECK(*batch == *micro * *acc * dp, "[config] inconsistent batch sizes: train_batch_size "
                                                  << *batch << " != train_micro_batch_size_per_gpu " << *micro
                                                  << " x gradient_accumulation_steps " << *acc
                                                  << " x data-parallel ranks " << dp);
  } else if (batch && micro) {
    TRIAD_CHECK(*batch % (*micro * dp) == 0, "[config] train_batch_size "
                                                 << *batch << " is not divisible by train_micro_batch_size_per_gpu "
                                                 << *micro << " x data-parallel ranks " << dp);
    acc = *batch / (*micro * dp);
  } else if (batch && acc) {
    TRIAD_CHECK(*batch % (*acc * dp) == 0, "[config] train_batch_size "
                                               << *batch << " is not divisible by gradient_accumulation_steps " << *acc
                                               << " x data-parallel ranks " << dp);
    micro = *batch / (*acc * dp);
  } else if (micro && acc) {
    batch = *micro * *acc * dp;
  } else if (batch) {
    TRIAD_CHECK(*batch % dp == 0,
                "[config] train_batch_size " << *batch << " is not divisible by data-parallel ranks " << dp);
    acc = 1, micro = *batch / dp;
  } else if (micro) {
    acc = 1, batch = *micro * dp;
  } else {
    throw Error("[config] give at least train_batch_size or train_micro_batch_size_per_gpu");
  }
  c.train_batch_size = *batch, c.micro_batch_size = *micro, c.gradient_accumulation_steps = *acc;
}

}  // namespace

nlohmann::json load_config_file(const std::string& path) {
  std::ifstream in(path);
  TRIAD_CHECK(in.good(), "cannot open config file '" << path << "'");
  try {
    return nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error("config file '" + path + "' is not valid JSON: " + e.what());
  }
}

namespace {

// DeepSpeed's file `from` (path b) into triad's `into` (path a), key by key: a value given in
// both must be the same, unless it is "auto" in one of them (HF's rule: "auto" takes the
// other's value).
void merge_into(nlohmann::json& into, const nlohmann::json& from, const std::string& path, const std::string& a,
                const std::string& b) {
  for (auto it = from.begin(); it != from.end(); ++it) {
    const std::string key = path.empty() ? it.key() : path + "." + it.key();
    if (!into.contains(it.key()) || is_auto_value(into[it.key()])) {
      into[it.key()] = *it;
      continue;
    }
    nlohmann::json& mine = into[it.key()];
    if (mine.is_object() && it->is_object()) {
      merge_into(mine, *it, key, a, b);
      continue;
    }
    TRIAD_CHECK(is_auto_value(*it) || mine == *it,
                "[config] " << key << " is " << mine.dump() << " in '" << a << "' and " << it->dump() << " in '" << b
                            << "'; give one value (\"auto\" in '" << b << "' takes the one in '" << a << "')");
  }
}

}  // namespace

nlohmann::json merge_deepspeed_config(const nlohmann::json& config, const std::string& config_path,
                                      const nlohmann::json& deepspeed, const std::string& deepspeed_path) {
  TRIAD_CHECK(deepspeed.is_object(), "DeepSpeed config '" << deepspeed_path << "' is not a JSON object");
  nlohmann::json out = config;
  merge_into(out, deepspeed, "", config_path, deepspeed_path);
  return out;
}

void apply_override(nlohmann::json& config, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  TRIAD_CHECK(eq != std::string::npos && eq > 0, "--set expects dotted.key=value, got '" << assignment << "'");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  nlohmann::json* node = &config;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    TRIAD_CHECK(!part.empty(), "--set: empty key segment in '" << key << "'");
    if (!node->is_object()) *node = nlohmann::json::object();
    if (dot == std::string::npos) {
      (*node)[part] = value;
      return;
    }
    node = &(*node)[part];
    start = dot + 1;
  }
}

// The tensor-parallel degree: model.tensor_parallel, or DeepSpeed's
// tensor_parallel.autotp_size (one of them, or both equal); it must divide the job's ranks
// and split the model section's model (GPT: heads, 4C; Llama: key/value heads, the MLP's
// hidden units, the head's vocabulary rows; sequence parallelism: the sequence too) when
// `builtin` (a model given as a list of layers splits its own). Sequence parallelism needs
// more than one tensor-parallel rank.
void resolve_tensor_parallel(JsonReader tp_section, TrainConfig& c, int64_t ranks, bool builtin) {
  const bool in_model = c.json.contains("model") && c.json["model"].contains("tensor_parallel");
  const int64_t autotp = tp_section.integer("autotp_size", c.tensor_parallel, 1, 1 << 16);
  tp_section.finish();
  TRIAD_CHECK(!in_model || autotp == c.tensor_parallel,
              "[config] model.tensor_parallel (" << c.tensor_parallel << ") and tensor_parallel.autotp_size ("
                                                 << autotp << ") disagree; give one of them");
  c.tensor_parallel = int(autotp);
  const int tp = c.tensor_parallel;
  TRIAD_CHECK(ranks % tp == 0, "[config] model.tensor_parallel " << tp << " does not divide the job's " << ranks
                                                                 << " ranks (data-parallel ranks = ranks / "
                                                                 << "tensor_parallel)");
  c.data_parallel = ranks / tp;
  TRIAD_CHECK(!c.sequence_parallel || tp > 1,
              "[config] model.sequence_parallel needs model.tensor_parallel > 1 (it splits each sequence over the "
              "tensor-parallel ranks), got model.tensor_parallel "
                  << tp);
  if (!builtin) return;
  const auto must_divide = [tp](const char* key, int64_t value) {
    TRIAD_CHECK(value % tp == 0, "[config] model.tensor_parallel " << tp << " must divide model." << key << " ("
                                                                   << value << ")");
  };
  if (c.arch == "llama") {
    must_divide("n_kv_head", c.llama.n_kv_head);
    must_divide("intermediate_size", c.llama.intermediate);
    must_divide("vocab_size", c.llama.vocab_size);
  } else {
    must_divide("n_head", c.model.n_head);
  }
  const int64_t seq_len = c.arch == "llama" ? c.llama.seq_len : c.model.seq_len;
  TRIAD_CHECK(!c.sequence_parallel || seq_len % tp == 0,
              "[config] model.sequence_parallel: model.seq_len (" << seq_len
                                                                  << ") must be divisible by model.tensor_parallel ("
                                                                  << tp << ")");
}

// DeepSpeed's pipeline section (stages, partition, activation_checkpoint_interval, and its
// seed_layers, pipe_partitioned, grad_partitioned) and triad's schedule and virtual_stages.
// The stages must divide the ranks left by tensor parallelism.
void parse_pipeline(JsonReader r, TrainConfig& c, int64_t ranks, std::vector<std::string>& notices) {
  PipelineConfig& p = c.pipeline;
  p.stages = int(r.integer("stages", 1, 1, 1 << 16));
  p.partition = r.string("partition", p.partition);
  p.activation_checkpoint_interval = int(r.integer("activation_checkpoint_interval", 0, 0, 1 << 20));
  p.schedule = r.string("schedule", p.schedule);
  p.virtual_stages = int(r.integer("virtual_stages", 1, 1, 1 << 10));
  if (r.boolean("seed_layers", false)) r.fail("seed_layers", "false: every layer's initial values come from the model's seed, whatever the stage");
  const bool pipe_partitioned = r.boolean("pipe_partitioned", true), grad_partitioned = r.boolean("grad_partitioned", true);
  if ((pipe_partitioned || grad_partitioned) && c.tensor_parallel > 1 && p.stages > 1)
    notices.push_back("pipeline.pipe_partitioned, grad_partitioned: each tensor-parallel rank sends the whole activation to the next stage");
  r.finish();
  const int64_t model_ranks = int64_t(c.tensor_parallel) * p.stages;
  TRIAD_CHECK(ranks % model_ranks == 0, "[config] model.tensor_parallel " << c.tensor_parallel << " x pipeline.stages "
                                                                          << p.stages << " does not divide the job's "
                                                                          << ranks << " ranks");
  c.data_parallel = ranks / model_ranks;
}

namespace {

// Mixture-of-Experts blocks over the grid: experts split over ep ranks of each data-parallel
// group, every layer's experts divisible by them; under tensor parallelism each tp rank
// holds the MoE layers whole and routes the same tokens (with sequence parallelism, the
// whole sequence gathered: nn::Parallelism::on_whole_sequence).
void check_moe_layout(const TrainConfig& c) {
  const nn::MoEModelConfig& moe = c.arch == "llama" ? c.llama.moe : c.model.moe;
  if (!moe.enabled()) return;
  const int64_t ep = c.expert_parallel;
  TRIAD_CHECK(c.data_parallel % ep == 0, "[config] model.moe.expert_parallel_size (" << ep << ") must divide the "
                                                                                      << c.data_parallel
                                                                                      << " data-parallel ranks");
  for (const int64_t e : moe.num_experts) {
    TRIAD_CHECK(moe.layer.k <= e, "[config] model.moe.top_k (" << moe.layer.k << ") must be at most "
                                                              << "model.moe.num_experts (" << e << ")");
    TRIAD_CHECK(e % ep == 0, "[config] model.moe.num_experts (" << e << ") must be divisible by "
                                                                << "model.moe.expert_parallel_size (" << ep << ")");
  }
}

// parse_config's body; `layers` is the model's list, or null for the GPT of the model section.
TrainConfig parse(const nlohmann::json& given, int64_t ranks, const nn::LayerList* layers) {
  TRIAD_CHECK(ranks >= 1, "parse_config: ranks must be >= 1");
  const nlohmann::json json = resolve_auto_values(given);
  TrainConfig c;
  c.json = json;
  JsonReader r(json, "config");
  parse_model(r.object("model"), c);
  resolve_tensor_parallel(r.object("tensor_parallel"), c, ranks, layers == nullptr);
  parse_pipeline(r.object("pipeline"), c, ranks, c.notices);
  const int64_t dp = c.data_parallel;
  check_moe_layout(c);
  parse_data(r.object("data"), c.data);
  resolve_batch(r, c, dp);
  parallel::check_pipe_schedule(parallel::parse_pipe_schedule(c.pipeline.schedule), c.pipeline.stages,
                                int(c.gradient_accumulation_steps), c.pipeline.virtual_stages);
  {  // the cut must exist (and the method be known, even at one stage): checked on every rank before any data is read
    std::vector<nn::LayerInfo> infos;
    for (const nn::LayerSpec& l : layers ? layers->layers : model_layers(c).layers)
      infos.push_back({l.type, l.parameters});
    nn::partition_layers(infos, c.pipeline.stages * c.pipeline.virtual_stages, c.pipeline.partition);
  }
  c.steps = r.integer("steps", 0, 1, kMaxInt);
  TRIAD_CHECK(r.has("steps"), "[config] steps is required (the number of optimizer steps)");
  parse_optimizer(r.object("optimizer"), c.optimizer, c.notices);
  parse_scheduler(r.object("scheduler"), c.scheduler, c.optimizer.lr);
  if (c.scheduler.cycle_momentum && c.optimizer.type == "SGD") {
    c.scheduler.cycle_momentum = false;
    c.notices.push_back(
        "scheduler.params.cycle_momentum: SGD has no betas; OneCycle cycles its learning rate alone "
        "(DeepSpeed's rule)");
  } else if (c.scheduler.cycle_momentum) {
    c.notices.push_back(
        "optimizer.params.betas: OneCycle with cycle_momentum sets Adam's betas to (its beta1, 0.99) "
        "at every step, as DeepSpeed does");
  }
  if ((c.scheduler.type == "WarmupCosineLR" || c.scheduler.type == "WarmupDecayLR") &&
      c.scheduler.total_num_steps == 0)
    c.scheduler.total_num_steps = c.steps;
  TRIAD_CHECK(c.scheduler.type != "constant" || c.scheduler.warmup_num_steps <= c.steps,
              "[config] scheduler.params.warmup_num_steps (" << c.scheduler.warmup_num_steps
                                                             << ") exceeds the run's steps (" << c.steps << ")");
  if ((c.scheduler.type == "WarmupCosineLR" || c.scheduler.type == "WarmupDecayLR") &&
      c.scheduler.total_num_steps < std::max<int64_t>(2, c.scheduler.warmup_num_steps))
    c.notices.push_back("scheduler.params.total_num_steps (" + std::to_string(c.scheduler.total_num_steps) +
                        ") is below warmup_num_steps (" + std::to_string(c.scheduler.warmup_num_steps) +
                        ", at least 2): the rate decays to its end right after the warmup (DeepSpeed warns the same)");
  bool host_parameters = false;
  parse_zero(r.object("zero_optimization"), c.zero, c.notices, host_parameters);
  if (r.has("aio")) parse_aio(r.object("aio"), c.zero.aio);  // (known only when given: no "did you mean aio")
  c.zero.validate(c.data_parallel);
  parse_precision(r.object("bf16"), r.object("fp16"), c.precision, c.notices);
  c.gradient_clipping = r.number("gradient_clipping", 0.0, 0.0, kInf);
  c.prescale_gradients = r.boolean("prescale_gradients", false);
  c.comm_timeout = r.number("comm_timeout", c.comm_timeout, 0.0, kInf);
  c.gradient_predivide_factor = r.number("gradient_predivide_factor", 1.0, 1e-30, kInf);
  parse_gradient_dtypes(r, c.precision.dtype);
  c.seed = uint64_t(r.integer("seed", 1234, 0, kMaxInt));
  c.model.init_seed = c.llama.init_seed = c.seed;
  c.eval_interval = r.integer("eval_interval", 0, 0, kMaxInt);
  c.eval_iters = r.integer("eval_iters", 10, 1, kMaxInt);
  TRIAD_CHECK(!(r.has("log_interval") && r.has("steps_per_print")),
              "[config] log_interval and steps_per_print (DeepSpeed's name) say the same; give one");
  c.log_interval = r.has("steps_per_print") ? r.integer("steps_per_print", 10, 1, kMaxInt)
                                            : r.integer("log_interval", 1, 1, kMaxInt);
  c.wall_clock_breakdown = r.boolean("wall_clock_breakdown", false);
  parse_monitor(r.object("csv_monitor"), c.csv_monitor);
  parse_monitor(r.object("tensorboard"), c.tensorboard);
  parse_flops_profiler(r.object("flops_profiler"), c.flops_profiler);
  if (r.has("moe")) {  // Megatron-DeepSpeed's models take their MoE arguments with the model's
    r.known("moe");
    const nlohmann::json& v = r.value("moe");
    TRIAD_CHECK(v.is_object() && v.contains("enabled") && v["enabled"] == false,
                "[config] moe: Mixture-of-Experts blocks are given in the model section, model.moe (docs/models.md)");
  }
  if (r.has("compression_training")) {
    c.compression = parse_compression(r.object("compression_training"),
                                      c.arch == "llama" ? c.llama.n_layer : c.model.n_layer, c.notices);
    TRIAD_CHECK(!(c.compression.quantizes() || c.compression.layer_reduction.enabled) ||
                    (c.tensor_parallel == 1 && c.pipeline.stages == 1),
                "[config] compression_training: quantization-aware training and layer reduction run on models held "
                "whole by each rank (tensor_parallel and pipeline.stages 1), got tensor_parallel "
                    << c.tensor_parallel << ", pipeline.stages " << c.pipeline.stages);
  }
  for (const auto& [key, what] : kDeepSpeedFeaturesNotAvailable) {
    if (!r.has(key)) continue;
    r.known(key);
    const nlohmann::json& v = r.value(key);
    TRIAD_CHECK(v.is_object() && v.contains("enabled") && v["enabled"] == false,
                "[config] " << key << ": DeepSpeed's " << what << " is not available in triad");
  }
  if (r.has("zero_allow_untested_optimizer")) {
    r.boolean("zero_allow_untested_optimizer", false);
    c.notices.push_back("zero_allow_untested_optimizer: ZeRO in triad runs its own AdamW, the one it tests");
  }
  c.device = r.string("device", "cpu");
  try {
    Device::parse(c.device);
  } catch (const Error& e) {
    throw Error(std::string("[config] device: ") + e.what());
  }
  if (host_parameters && Device::parse(c.device).is_cpu())
    c.notices.push_back("zero_optimization.offload_param: on a CPU training device the parameters already live in "
                        "host memory");
  c.distributed_backend = r.choice("distributed_backend", c.distributed_backend, {"auto", "mpi", "nccl"});
  c.output_dir = r.string("output_dir", "");
  parse_checkpoint(r.object("checkpoint"), c.checkpoint);
  parse_cuda_graph(r.object("cuda_graph"), c);
  parse_cluster(r.object("cluster"), c.cluster);
  if (r.has("cluster") && r.value("cluster").contains("ranks_per_node"))
    c.emulated_ranks_per_node = c.cluster.ranks_per_node;
  TRIAD_CHECK(
      c.checkpoint.dir.empty() || c.optimizer.type == "AdamW",
      "[config] checkpoint.dir is set but checkpoints hold AdamW's state; optimizer.type is " << c.optimizer.type);
  r.finish();

  c.json = json;
  c.json["train_batch_size"] = c.train_batch_size;
  c.json["train_micro_batch_size_per_gpu"] = c.micro_batch_size;
  c.json["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  return c;
}

}  // namespace

TrainConfig parse_config(const nlohmann::json& json, int64_t ranks) { return parse(json, ranks, nullptr); }

TrainConfig parse_config(const nlohmann::json& json, int64_t ranks, const nn::LayerList& layers) {
  return parse(json, ranks, &layers);
}

optim::LossScaleConfig PrecisionConfig::loss_scale() const {
  return {.dynamic = dtype == DType::f16 && static_loss_scale == 0,
          .static_scale = static_loss_scale,
          .initial_scale = std::ldexp(1.0, initial_scale_power),
          .window = loss_scale_window,
          .hysteresis = hysteresis,
          .consecutive_hysteresis = consecutive_hysteresis,
          .min_scale = min_loss_scale};
}

}  // namespace triad::engine
