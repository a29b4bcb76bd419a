#include "bench/step.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "bench/workers.h"
#include "common/report.h"
#include "config/config.h"
#include "config/model_factory.h"
#include "cuda/runtime.h"
#include "engine/engine.h"
#include "parallel/runtime.h"
#include "parallel/self_communicator.h"
#include "triad.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kDefaultPeakTflops = 989.0;  // H100/H200 SXM, dense bf16

}  // namespace

double dense_bf16_peak_tflops(const std::string& device_name) {
  // The first entry whose text the name contains: variants before the family's default.
  static const std::pair<const char*, double> known[] = {
      {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.0}, {"H200", 989.0}, {"A100", 312.0}};
  for (const auto& [part, tflops] : known)
    if (device_name.find(part) != std::string::npos) return tflops;
  return 0.0;
}

int run_step_bench(const StepOptions& o) {
  parallel::CommunicatorPtr world = std::make_shared<parallel::SelfCommunicator>();
  if (o.tp > 1) {
    TRIAD_CHECK(parallel::launched_by_mpirun(), "--tp " << o.tp << ": run under mpirun -np " << o.tp);
    int argc = 0;
    char** argv = nullptr;
    world = parallel::init(argc, argv);
    TRIAD_CHECK(world->size() == o.tp, "--tp " << o.tp << " needs mpirun -np " << o.tp << ", got " << world->size()
                                               << " ranks");
  }
  const bool leader = world->rank() == 0;
  const int threads = app::set_threads(o.tp > 1 ? parallel::threads_per_rank(o.threads) : o.threads);
  engine::TrainConfig train;  // the model: a GPT preset, or a config's GPT or Llama
  train.model = nn::GPTConfig::preset(o.model);
  std::string name = o.model;
  if (!o.config.empty()) {
    nlohmann::json json = engine::load_config_file(o.config);
    for (const std::string& s : o.overrides) engine::apply_override(json, s);
    const engine::TrainConfig parsed = engine::parse_config(json);
    train.arch = parsed.arch, train.model = parsed.model, train.llama = parsed.llama;
    name = o.config;
  }
  if (o.checkpointing) {  // the GPT recomputes its blocks; the Llama, a layer list, each layer
    if (train.arch == "llama")
      train.pipeline.activation_checkpoint_interval = 1;
    else
      train.model.activation_checkpointing = true;
  }
  const engine::ModelShape shape = engine::model_shape(train);
  TRIAD_CHECK(o.seq <= shape.seq_len, "--seq " << o.seq << " exceeds the model's seq_len " << shape.seq_len);
  const Device device = engine::training_device(o.device);
  const DType dtype = o.dtype.empty() ? (device.is_cuda() ? DType::bf16 : DType::f32) : dtype_from_name(o.dtype);

  train.train_batch_size = train.micro_batch_size = o.batch;
  train.gradient_accumulation_steps = 1;
  train.steps = o.warmup + o.steps;
  train.optimizer = {.type = "AdamW", .lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1};
  train.precision.dtype = dtype;
  train.device = o.device;
  train.tensor_parallel = o.tp;
  train.sequence_parallel = o.sequence_parallel;
  if (o.cuda_graph) {
    TRIAD_CHECK(o.warmup >= 2 && o.tp == 1 && world->size() == 1,
                "triad-bench step --cuda-graph: one process (no --tp, no mpirun) and --warmup 2 or more (a plain "
                "step, then the recording), got --warmup "
                    << o.warmup << ", --tp " << o.tp);
    train.cuda_graph = {.enabled = true, .warmup_steps = 1};
  }
  engine::Engine engine(train, engine::process_grid(train, world));

  const Tensor all = random_token_ids(o.batch, o.seq + 1, shape.vocab_size, 7);
  const Tensor x = ops::contiguous(ops::narrow(all, 1, 0, o.seq)), y = ops::contiguous(ops::narrow(all, 1, 1, o.seq));

  // 6N + 6 L C T FLOPs per token: N parameters (embeddings included), T the sequence.
  const double n_params = double(shape.parameters);
  const double flops_per_token = 6.0 * n_params + 6.0 * double(shape.n_layer * shape.d_model * o.seq);
  const double tokens_per_step = double(o.batch * o.seq);
  std::string device_name = "cpu";
  double peak_tflops = o.peak_tflops;
  if (device.is_cuda()) {
    device_name = cuda::device_properties(device.index).name;
    if (peak_tflops == 0) peak_tflops = dense_bf16_peak_tflops(device_name);
    if (peak_tflops == 0) {
      peak_tflops = kDefaultPeakTflops;
      std::printf("note: no known bf16 peak for %s; MFU is against %.0f TFLOP/s (H100/H200 SXM), set --peak-tflops\n",
                  device_name.c_str(), peak_tflops);
    }
    cuda::reset_peak_memory_stats(device.index);
  }
  if (leader) {
    std::printf("triad-bench step: %s (%.1fM parameters), batch %lld x seq %lld, %s on %s (%s), %d threads, tp %d%s\n",
                name.c_str(), n_params / 1e6, (long long)o.batch, (long long)o.seq, dtype_name(dtype),
                device.str().c_str(), device_name.c_str(), threads, o.tp, o.sequence_parallel ? " (sequence parallel)" : "");
    std::printf("%6s %10s %10s %10s %10s %10s\n", "step", "fwd_ms", "bwd_ms", "optim_ms", "step_ms", "loss");
  }

  // Each phase ends when the device has finished it, not when the host has queued it.
  const auto finish = [&] {
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;
  double tp_bus_bytes = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const auto t0 = Clock::now();
    double f = NAN, b = NAN, u = NAN;
    Tensor loss;
    engine::StepResult r;
    if (o.cuda_graph) {  // the step whole: its phases are one replay
      const engine::TrainStep whole = engine.train_step({x}, {y});
      r = whole.queued.read(), loss = whole.losses;
    } else {
      loss = engine.forward(x, y);
      finish();
      f = app::ms_since(t0);
      const auto t1 = Clock::now();
      engine.backward(loss);
      finish();
      b = app::ms_since(t1);
      const auto t2 = Clock::now();
      r = engine.step();
      finish();
      u = app::ms_since(t2);
    }
    const double total = app::ms_since(t0);
    if (r.comm.contains("tp")) tp_bus_bytes = r.comm["tp"]["bus_bytes"].get<double>();
    if (leader)
      std::printf("%6d %10.1f %10.1f %10.1f %10.1f %10.4f%s\n", s, f, b, u, total, loss.item(),
                s < o.warmup ? "  (warmup)" : "");
    if (s < o.warmup) continue;
    step_ms.push_back(total);
    fwd_ms.push_back(f);
    bwd_ms.push_back(b);
    opt_ms.push_back(u);
  }
  const double med = app::median(step_ms);
  const double tps = tokens_per_step / (med / 1e3);
  const double gflops = flops_per_token * tps / 1e9;
  nlohmann::json mfu = nullptr, peak_allocated = nullptr, peak_reserved = nullptr;
  const zero::ResidentBytes m = engine.memory();
  const double model_state_mib = double(m.param_bytes + m.grad_bytes + m.optim_bytes) / double(1 << 20);
  if (!leader) return 0;
  std::printf("median: %.1f ms/step (fwd %.1f, bwd %.1f, optim %.1f), %.0f tokens/s, %.1f GFLOP/s", med,
              app::median(fwd_ms), app::median(bwd_ms), app::median(opt_ms), tps, gflops);
  if (peak_tflops > 0) {
    mfu = gflops / (peak_tflops * 1e3);
    std::printf(", MFU %.1f%% of %.0f TFLOP/s", 100.0 * mfu.get<double>(), peak_tflops);
  }
  std::printf(", peak RSS %.0f MiB, model states %.1f MiB per rank", app::peak_rss_mb(), model_state_mib);
  if (o.tp > 1) std::printf(", tp bus %.1f MB/step", tp_bus_bytes / 1e6);
  if (device.is_cuda()) {
    const cuda::MemoryStats m = cuda::memory_stats(device.index);
    peak_allocated = double(m.peak_allocated_bytes) / double(1 << 20);
    peak_reserved = double(m.peak_reserved_bytes) / double(1 << 20);
    std::printf(", device memory peak %.0f MiB allocated, %.0f MiB reserved", peak_allocated.get<double>(),
                peak_reserved.get<double>());
  }
  std::printf("\n");
  app::print_json_line({{"bench", "step"},
                        {"model", name},
                        {"params", int64_t(n_params)},
                        {"batch", o.batch},
                        {"seq", o.seq},
                        {"device", device.str()},
                        {"device_name", device_name},
                        {"dtype", dtype_name(dtype)},
                        {"cuda_graph", o.cuda_graph},
                        {"threads", threads},
                        {"steps", o.steps},
                        {"step_ms_median", med},
                        {"fwd_ms_median", app::median(fwd_ms)},
                        {"bwd_ms_median", app::median(bwd_ms)},
                        {"optim_ms_median", app::median(opt_ms)},
                        {"tokens_per_s", tps},
                        {"flops_per_token", flops_per_token},
                        {"achieved_gflops", gflops},
                        {"peak_tflops", peak_tflops > 0 ? nlohmann::json(peak_tflops) : nlohmann::json(nullptr)},
                        {"mfu", mfu},
                        {"peak_rss_mb", app::peak_rss_mb()},
                        {"tp", o.tp},
                        {"sequence_parallel", o.sequence_parallel},
                        {"model_state_mib_per_rank", model_state_mib},
                        {"tp_bus_bytes_per_step", tp_bus_bytes},
                        {"device_peak_allocated_mib", peak_allocated},
                        {"device_peak_reserved_mib", peak_reserved}});
  return 0;
}

}  // namespace triad::bench
