#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cuda/runtime.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "monitor/csv_monitor.h"
#include "engine/engine.h"
#include "profiler/flops_profiler.h"
#include "config/model_factory.h"
#include "monitor/tensorboard_monitor.h"
#include "parallel/process_grid.h"
#include "parallel/self_communicator.h"
#include "tensor/allocator.h"
#include "tensor/ops.h"

namespace triad::engine {

namespace {

using Clock = std::chrono::steady_clock;

std::string duration_text(double seconds) {
  char buf[32];
  const long s = long(seconds + 0.5);
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// Every rank must run the same configuration: compare a hash of it before any other
// collective, so a mismatch is one clear error instead of a hang or silent divergence.
// The flops profiler's report: to standard output, or to `path` (its folder created).
void write_profile(const std::string& report, const std::string& path) {
  if (path.empty()) {
    std::fputs(report.c_str(), stdout);
    std::fflush(stdout);
    return;
  }
  const std::filesystem::path file(path);
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  std::ofstream out(path);
  out << report;
  out.flush();
  TRIAD_CHECK(!ec && out.good(), "[flops_profiler] cannot write output_file '" << path << "'");
}

void check_same_config(const TrainConfig& c, parallel::Communicator& world) {
  const int64_t mine = int64_t(std::hash<std::string>{}(c.json.dump()) >> 1);
  Tensor all = Tensor::empty({world.size()}, DType::i64);
  Tensor own = Tensor::from_vector(std::vector<int64_t>{mine}, {1});
  world.all_gather(own, all)->wait();
  for (int64_t h : all.to_vector<int64_t>())
    TRIAD_CHECK(h == mine, "[config] the configuration differs between ranks (rank "
                               << world.rank() << " holds another one); give every rank the same config and --set flags");
}

}  // namespace

double train(const TrainConfig& c, const TrainOptions& options, parallel::CommunicatorPtr world,
             std::unique_ptr<TrainingData> data) {
  const bool leader = !world || world->rank() == 0;
  if (world) check_same_config(c, *world);
  const int pp_stages = c.pipeline.stages;
  TRIAD_CHECK(int64_t(c.tensor_parallel) * pp_stages * c.data_parallel == (world ? world->size() : 1),
              "[config] model.tensor_parallel " << c.tensor_parallel << " x pipeline.stages " << pp_stages << " x "
                                                << c.data_parallel << " data-parallel ranks does not match the job's "
                                                << (world ? world->size() : 1) << " ranks");
  // The grid: tp consecutive ranks split each layer, pp stages (outermost) split the layers,
  // the rest is data-parallel (parallel/process_grid.h).
  std::unique_ptr<parallel::ProcessGrid> grid;
  parallel::CommunicatorPtr dp = world, tp, pp;
  if (c.tensor_parallel > 1 || pp_stages > 1) {
    grid = std::make_unique<parallel::ProcessGrid>(world, c.tensor_parallel, int(c.data_parallel), pp_stages);
    dp = grid->dp(), tp = grid->tp(), pp = grid->pp();
  }
  const int n = dp ? dp->size() : 1, rank = dp ? dp->rank() : 0;
  // A device or distributed backend this rank cannot train with fails before the data is read.
  const Device device = training_device(c.device);
  resolve_distributed_backend(c.distributed_backend, device, n, shared_gpu(dp.get(), device));
  TRIAD_CHECK(c.train_batch_size == c.micro_batch_size * c.gradient_accumulation_steps * n,
              "[config] train_batch_size " << c.train_batch_size << " != train_micro_batch_size_per_gpu "
                                           << c.micro_batch_size << " x gradient_accumulation_steps "
                                           << c.gradient_accumulation_steps << " x data-parallel ranks " << n);
  if (!data) data = corpus_data(c);
  const ModelShape shape = model_shape(c);
  // Validation batches of micro x ranks rows, each rank evaluating its own rows: the same
  // rows are evaluated whatever the number of ranks.
  std::vector<std::pair<Tensor, Tensor>> val_batches;
  for (int64_t i = 0; i < c.eval_iters && data->has_validation(); ++i) {
    io::Batch b = data->validation(i, c.micro_batch_size * n, rank * c.micro_batch_size, c.micro_batch_size);
    val_batches.emplace_back(b.inputs, b.targets);
  }
  const parallel::CommunicatorPtr comm = world ? world : std::make_shared<parallel::SelfCommunicator>();
  const std::string checkpoint_dir = options.save_dir.empty() ? c.checkpoint.dir : options.save_dir;
  TRIAD_CHECK(!c.flops_profiler.enabled || pp_stages == 1,
              "[config] flops_profiler: profiling a pipeline-parallel run is not available (profile it with "
              "pipeline.stages 1)");
  TRIAD_CHECK(options.init.empty() || pp_stages == 1,
              "--init loads a model held whole by each rank; start pipeline-parallel runs from a checkpoint "
              "(triad-ckpt import makes one) with --resume");
  const std::unique_ptr<Engine> held =
      options.init.empty() ? std::make_unique<Engine>(c, dp, tp, pp)
                           : std::make_unique<Engine>(
                                 c,
                                 [&](std::shared_ptr<const nn::Parallelism> par) -> nn::ModulePtr {
                                   std::shared_ptr<nn::LanguageModel> m = build_model(c, std::move(par));
                                   load_parameters(options.init, *m);
                                   return m;
                                 },
                                 dp, tp);
  Engine& engine = *held;
  if (leader && !options.init.empty()) std::printf("initialized from %s\n", options.init.c_str());
  if (!options.resume.empty()) {
    const std::string from = resume(options.resume, checkpoint_dir, engine, *comm);
    if (leader && !from.empty())
      std::printf("resumed from %s at step %lld\n", from.c_str(), (long long)engine.global_step());
    TRIAD_CHECK(engine.global_step() <= c.steps,
                "the checkpoint is at step " << engine.global_step() << ", beyond the run's steps " << c.steps);
  }
  const int64_t first_step = engine.global_step();
  std::ofstream metrics;
  if (leader && !options.metrics_path.empty()) {
    metrics.open(options.metrics_path, first_step > 0 ? std::ios::app : std::ios::trunc);
    TRIAD_CHECK(metrics.good(), "cannot write the metrics file '" << options.metrics_path << "'");
  }
  if (leader)
    for (const std::string& notice : c.notices) std::printf("note: %s\n", notice.c_str());
  if (leader)
    std::printf("model: %s, %.2fM parameters (%s)\n", c.arch.c_str(), double(shape.parameters) / 1e6,
                shape.summary.c_str());
  if (leader)
    std::printf("data: %s; batch %lld = %lld micro x %lld accumulation\n", data->describe().c_str(),
                (long long)c.train_batch_size, (long long)c.micro_batch_size, (long long)c.gradient_accumulation_steps);
  std::fflush(stdout);

  auto evaluate = [&](int64_t step) -> double {
    if (val_batches.empty()) return NAN;
    double v = engine.evaluate(val_batches);
    if (dp) {
      Tensor total = Tensor::full({1}, v, DType::f64);
      dp->all_reduce(total)->wait();
      v = total.item() / double(n);
    }
    if (leader) std::printf("step %6lld | val loss %.4f\n", (long long)step, v);
    std::fflush(stdout);
    return v;
  };

  // Model-state bytes resident on a rank, the maximum over ranks (constant over the run).
  nlohmann::json mem;
  if (world) {
    const zero::ResidentBytes m = engine.memory();
    Tensor v = Tensor::from_vector(
        std::vector<double>{double(m.param_bytes), double(m.grad_bytes), double(m.optim_bytes), double(m.buffer_bytes)},
        {4});
    world->all_reduce(v, parallel::ReduceOp::max)->wait();
    const std::vector<double> b = v.to_vector<double>();
    mem = {{"param_bytes", b[0]}, {"grad_bytes", b[1]}, {"optim_bytes", b[2]}, {"buffer_bytes", b[3]}};
  }
  double last_val = NAN;
  const auto start = Clock::now();
  const auto save = [&] {
    const auto t0 = Clock::now();
    const std::string path = save_to_dir(checkpoint_dir, c.checkpoint.keep, engine, *comm);
    if (leader)
      std::printf("step %6lld | saved %s in %.2f s\n", (long long)engine.global_step(), path.c_str(),
                  std::chrono::duration<double>(Clock::now() - t0).count());
    std::fflush(stdout);
  };
  // wall_clock_breakdown (DeepSpeed's timers): the host waits for the device at each phase's
  // end, so that the phases' wall times are theirs.
  const auto phase_end = [&](Clock::time_point since) {
    if (engine.device().is_cuda()) cuda::synchronize(engine.device().index);
    return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
  };
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double pipe_wait_ms = 0;  // pipelines: the pipeline phase less its actions' computing (bubble, messages)
  int64_t timed_steps = 0;
  std::vector<std::unique_ptr<Monitor>> monitors;
  if (leader && c.csv_monitor.enabled) monitors.push_back(std::make_unique<CsvMonitor>(c.csv_monitor));
  if (leader && c.tensorboard.enabled) monitors.push_back(std::make_unique<TensorBoardMonitor>(c.tensorboard));
  std::unique_ptr<FlopsProfiler> profiler;
  if (leader && c.flops_profiler.enabled && c.flops_profiler.profile_step >= first_step &&
      c.flops_profiler.profile_step < c.steps)
    profiler = std::make_unique<FlopsProfiler>(engine.model_ptr(), engine.device());
  ProfiledStep profiled{.step = c.flops_profiler.profile_step,
                        .world_size = n * c.tensor_parallel * pp_stages,
                        .data_parallel = n,
                        .model_parallel = c.tensor_parallel,
                        .micro_batch = c.micro_batch_size};
  // The step's activation peak (metrics mem.activation_peak_bytes): the most the device's
  // allocator held during the step's forward and backward passes beyond what it held when
  // the step began, which leaves out the model states and optimizer state. What the passes
  // allocate besides activations counts too: gradients not yet in their buffers, ZeRO-3's
  // gathered parameters, transients, and on the CPU the step's token batches.
  Allocator& device_memory = allocator_for(engine.device());
  for (int64_t step = first_step; step < c.steps; ++step) {
    const auto t0 = Clock::now();
    const size_t step_base = device_memory.bytes_in_use();
    device_memory.reset_peak();
    const bool profiling = profiler && step == c.flops_profiler.profile_step;
    const double forward_before = forward_ms, backward_before = backward_ms;
    int64_t step_positions = 0;  // this rank's input positions (padding included) over the step's micro-batches
    const auto micro_batch = [&](int64_t m) {  // this rank's rows of micro-batch m
      io::Batch b = data->batch(step, c.train_batch_size, (m * n + rank) * c.micro_batch_size, c.micro_batch_size);
      step_positions += b.inputs.numel();
      return b;
    };
    // The micro-batches' losses stay where they were computed until the step is done, then
    // come to the host in one copy: the host never waits for the device mid-step.
    Tensor losses;
    if (engine.pipelined()) {
      std::vector<Tensor> inputs, targets;
      for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
        io::Batch b = micro_batch(m);
        inputs.push_back(b.inputs), targets.push_back(b.targets);
      }
      const auto f0 = Clock::now();
      losses = engine.forward_backward(inputs, targets);
      if (c.wall_clock_breakdown) {  // the forward and backward actions' own time; the rest is waiting
        const double phase = phase_end(f0);
        double f = 0, b = 0;
        for (const parallel::ActionTiming& a : engine.pipeline()->timings())
          (a.action.op == parallel::PipeOp::forward ? f : b) += (a.end - a.start - a.waited) * 1e3;
        forward_ms += f, backward_ms += b, pipe_wait_ms += std::max(0.0, phase - f - b);
      }
    }
    for (int64_t m = 0; m < c.gradient_accumulation_steps && !engine.pipelined(); ++m) {
      const io::Batch b = micro_batch(m);
      const bool profile = profiling && m == 0;  // the first micro-batch, as DeepSpeed's profiler
      const bool timed = c.wall_clock_breakdown || profile;
      if (profile) profiler->start();
      const auto f0 = Clock::now();
      const Tensor loss = engine.forward(b.inputs, b.targets);
      if (!losses.defined()) losses = Tensor::empty({c.gradient_accumulation_steps}, loss.dtype(), loss.device());
      ops::copy_(ops::select(losses, 0, m), loss);
      const double f_ms = timed ? phase_end(f0) : 0;
      if (profile) profiler->stop(), profiled.forward_s = f_ms / 1e3;
      const auto b0 = Clock::now();
      engine.backward(loss);
      const double b_ms = timed ? phase_end(b0) : 0;
      if (profile) profiled.backward_s = b_ms / 1e3;
      if (c.wall_clock_breakdown) forward_ms += f_ms, backward_ms += b_ms;
    }
    double activation_peak = double(device_memory.peak_bytes() - step_base);
    const auto s0 = Clock::now();
    const StepResult r = engine.step();
    const double s_ms = c.wall_clock_breakdown || profiling ? phase_end(s0) : 0;
    if (c.wall_clock_breakdown) optimizer_ms += s_ms, ++timed_steps;
    const double step_forward_ms = forward_ms - forward_before, step_backward_ms = backward_ms - backward_before;
    if (profiling) {
      profiled.step_s = s_ms / 1e3;
      write_profile(profiler->report(profiled, c.flops_profiler), c.flops_profiler.output_file);
    }
    double loss_sum = 0;
    const std::vector<double> micro_losses = losses.to_vector<double>();
    for (size_t m = 0; m < micro_losses.size(); ++m) {
      TRIAD_CHECK(std::isfinite(micro_losses[m]), "[train] the loss is " << micro_losses[m] << " at step " << step + 1
                                                                         << " (micro-batch " << m
                                                                         << "); lower optimizer.params.lr or set "
                                                                         << "gradient_clipping; nothing was saved");
      loss_sum += micro_losses[m];
    }
    TRIAD_CHECK(r.skipped || std::isfinite(r.grad_norm),
                "[train] the gradient norm is " << r.grad_norm << " at step " << r.step << "; nothing was saved");
    if (r.skipped && leader)
      std::printf("step %6lld: gradients overflowed, step skipped; loss scale now %g\n", (long long)r.step,
                  r.loss_scale);
    if (dp) {
      Tensor total = Tensor::full({1}, loss_sum, DType::f64);
      dp->all_reduce(total)->wait();
      loss_sum = total.item();
    }
    // The rank that held the most (pipeline stages differ), for the metrics line alone: no
    // collective when there is none (metrics_path is the same on every rank).
    if (world && !options.metrics_path.empty()) {
      Tensor peak = Tensor::full({1}, activation_peak, DType::f64);
      world->all_reduce(peak, parallel::ReduceOp::max)->wait();
      activation_peak = peak.item();
    }
    const double loss = loss_sum / double(c.gradient_accumulation_steps * n);
    const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    // Tokens per second over the job: this rank's count times the ranks (their padded
    // batches may differ a little in length).
    const double tps = double(step_positions * n) / (step_ms / 1e3);
    if (leader && (r.step % c.log_interval == 0 || r.step == c.steps)) {
      const double eta = elapsed / double(r.step - first_step) * double(c.steps - r.step);
      std::printf("step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %7.0f tok/s | %s elapsed, ETA %s\n",
                  (long long)r.step, (long long)c.steps, loss, r.lr, r.grad_norm, tps, duration_text(elapsed).c_str(),
                  duration_text(eta).c_str());
      if (c.wall_clock_breakdown) {
        const double steps = double(timed_steps);
        std::printf("step %6lld | time (ms), mean of the last %lld steps, rank 0 | forward %.2f | backward %.2f | ",
                    (long long)r.step, (long long)timed_steps, forward_ms / steps, backward_ms / steps);
        if (engine.pipelined()) std::printf("pipeline wait %.2f | ", pipe_wait_ms / steps);
        std::printf("step %.2f\n", optimizer_ms / steps);
        forward_ms = backward_ms = optimizer_ms = pipe_wait_ms = 0, timed_steps = 0;
      }
      std::fflush(stdout);
    }
    nlohmann::json line = {{"step", r.step},           {"loss", loss},       {"lr", r.lr},
                           {"grad_norm", r.grad_norm}, {"step_ms", step_ms}, {"tokens_per_s", tps}};
    if (world) line["mem"] = mem, line["comm"] = r.comm;
    line["mem"]["activation_peak_bytes"] = activation_peak;
    if (c.precision.dtype == DType::f16) line["loss_scale"] = r.loss_scale, line["skipped"] = r.skipped;
    if ((c.eval_interval > 0 && r.step % c.eval_interval == 0) || r.step == c.steps)
      line["val_loss"] = last_val = evaluate(r.step);
    for (const std::unique_ptr<Monitor>& monitor : monitors) {  // DeepSpeed's events (the lr: this step's)
      const int64_t samples = r.step * c.train_batch_size;
      monitor->write("Train/Samples/train_loss", loss, samples);
      monitor->write("Train/Samples/lr", r.lr, samples);
      if (c.precision.dtype == DType::f16) monitor->write("Train/Samples/loss_scale", r.loss_scale, samples);
      if (c.wall_clock_breakdown) {
        monitor->write("Train/Samples/elapsed_time_ms_forward", step_forward_ms, samples);
        monitor->write("Train/Samples/elapsed_time_ms_backward", step_backward_ms, samples);
        monitor->write("Train/Samples/elapsed_time_ms_step", s_ms, samples);
      }
      monitor->flush();
    }
    if (metrics.is_open()) {
      metrics << line.dump() << "\n";
      metrics.flush();
    }
    if (!checkpoint_dir.empty() && ((c.checkpoint.every > 0 && r.step % c.checkpoint.every == 0) || r.step == c.steps))
      save();
  }
  if (!c.output_dir.empty()) {
    create_folder(c.output_dir, *comm);
    const std::string path = c.output_dir + "/model.h5";
    save_weights(path, engine, *comm, DType::f32);
    if (leader) std::printf("saved %s\n", path.c_str());
  }
  return last_val;
}

}  // namespace triad::engine
