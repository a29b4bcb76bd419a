#include "train/trainer.h"

#include <algorithm>
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
#include "parallel/watchdog.h"
#include "tensor/allocator.h"
#include "tensor/ops.h"
#include "train/moe_metrics.h"
#include "train/preemption.h"
#include "train/compression_training.h"
#include "train/stall_hook.h"

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

// Every rank must run the same configuration: compare a hash of it before any other
// collective, so a mismatch is one clear error instead of a hang or silent divergence.
void check_same_config(const TrainConfig& c, parallel::Communicator& world) {
  const int64_t mine = int64_t(std::hash<std::string>{}(c.json.dump()) >> 1);
  Tensor all = Tensor::empty({world.size()}, DType::i64);
  Tensor own = Tensor::from_vector(std::vector<int64_t>{mine}, {1});
  world.all_gather(own, all)->wait();
  for (int64_t h : all.to_vector<int64_t>())
    TRIAD_CHECK(h == mine, "[config] the configuration differs between ranks (rank "
                               << world.rank() << " holds another one); give every rank the same config and --set flags");
}

// Note [Host synchronisation in a step]
// On a GPU the host queues a step's kernels and runs ahead of the device; it waits for the
// device only where it needs a value the device computes. In a step of one process
// (forward, backward and ZeRO's step per micro-batch) it waits:
// - for the gradient norm, in ZeroOptimizer::step. Without loss scaling, once the update is
//   queued: the norm's square stays on the device (ops::squared_norm), clipping reads it
//   there (ops::clip_to_norm_), and StepResult's norm is read after the step's last launch.
//   With fp16's loss scaling, before the update (grad_norm): the overflow verdict decides on
//   the host whether the step is skipped and how the scale changes. Keeping that on the
//   device too (the update skipped by the kernel on a found-inf flag, as Megatron and Apex
//   do) needs the loss scale on the device and StepResult's figures read lazily: not done;
//   under tensor parallelism the norm's counted and uncounted parts are summed on the host
//   before the update as well;
// - for the micro-batches' losses, at the step's end (mean_loss): they stay on the device
//   until the step is queued and come back in one copy; every step's loss is checked for a
//   non-finite value and written to the metrics line, so it is read every step;
// - with wall_clock_breakdown or at the flops profiler's step, at every phase's end
//   (phase_end): those time the device's phases, which a wait alone makes measurable.
// Batches go to the device through pinned staging buffers without a wait (cuda/transfer.cu)
// and the optimizer is one launch (Note [Multi-tensor optimizer]). Ranks that share a GPU
// reach each other through host memory (MPI), and each such collective waits for its copy
// to the host; over NCCL the collectives are queued on the device. A CUDA graph of the
// whole step needs the two reads at the step's end moved out of it.

// This rank's forward and backward passes of one step.
struct Passes {
  Tensor losses;               // the micro-batches' losses (gradient_accumulation_steps,), where computed
  int64_t positions = 0;       // this rank's input positions (padding included) over the micro-batches
  double activation_peak = 0;  // bytes (metrics mem.activation_peak_bytes)
};

// wall_clock_breakdown's sums (DeepSpeed's timers), in ms, since the last progress line.
struct Breakdown {
  double forward = 0, backward = 0, optimizer = 0;
  double pipe_wait = 0;  // pipelines: the pipeline phase less its actions' computing (bubble, messages)
  int64_t steps = 0;
};

// One call of train(): the steps a run goes through, in the order run() takes them.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& c, const TrainOptions& options, parallel::CommunicatorPtr world,
              std::unique_ptr<TrainingData> data)
      : c_(c), options_(options), world_(std::move(world)), data_(std::move(data)) {}

  double run() {
    set_up();
    resume_from_checkpoint();
    open_outputs();
    for (int64_t step = first_step_; step < c_.steps; ++step) {
      run_step(step);
      if (options_.stop_on_signal && signalled_anywhere()) stop_for_preemption();
    }
    save_model();
    return last_val_;
  }

 private:
  // The grid and the engine, after the checks that need no model: the same configuration
  // on every rank, a layout matching the job, a device and backend this rank can use, the
  // batch sizes; the validation batches.
  void set_up() {
    if (world_) check_same_config(c_, *world_);
    // tp consecutive ranks split each layer, pp stages (outermost) split the layers, the
    // rest is data-parallel (parallel/process_grid.h).
    grid_ = process_grid(c_, world_);
    const parallel::CommunicatorPtr& dp = grid_->dp();
    n_ = dp->size(), rank_ = dp->rank();
    // A device or distributed backend this rank cannot train with fails before the data is read.
    const Device device = training_device(c_.device);
    resolve_distributed_backend(c_.distributed_backend, device, n_, shared_gpu(dp.get(), device));
    TRIAD_CHECK(c_.train_batch_size == c_.micro_batch_size * c_.gradient_accumulation_steps * n_,
                "[config] train_batch_size " << c_.train_batch_size << " != train_micro_batch_size_per_gpu "
                                             << c_.micro_batch_size << " x gradient_accumulation_steps "
                                             << c_.gradient_accumulation_steps << " x data-parallel ranks " << n_);
    if (!data_) data_ = corpus_data(c_);
    // Validation batches of micro x ranks rows, each rank evaluating its own rows: the same
    // rows are evaluated whatever the number of ranks.
    for (int64_t i = 0; i < c_.eval_iters && data_->has_validation(); ++i) {
      io::Batch b = data_->validation(i, c_.micro_batch_size * n_, rank_ * c_.micro_batch_size, c_.micro_batch_size);
      val_batches_.emplace_back(b.inputs, b.targets);
    }
    TRIAD_CHECK(!c_.flops_profiler.enabled || c_.pipeline.stages == 1,
                "[config] flops_profiler: profiling a pipeline-parallel run is not available (profile it with "
                "pipeline.stages 1)");
    TRIAD_CHECK(options_.init.empty() || c_.pipeline.stages == 1,
                "--init loads a model held whole by each rank; start pipeline-parallel runs from a checkpoint "
                "(triad-ckpt import makes one) with --resume");
    const CompressionConfig::LayerReduction& reduction = c_.compression.layer_reduction;
    TRIAD_CHECK(!reduction.enabled || !options_.init.empty(),
                "[config] compression_training.layer_reduction needs --init, the model whose blocks teacher_layer "
                "names");
    engine_ = options_.init.empty() ? std::make_unique<Engine>(c_, grid_)
                                    : std::make_unique<Engine>(
                                          c_,
                                          [&](std::shared_ptr<const nn::Parallelism> par) -> nn::ModulePtr {
                                            std::shared_ptr<nn::LanguageModel> m = build_model(c_, std::move(par));
                                            if (reduction.enabled)
                                              reduce_layers(*m, options_.init, reduction);
                                            else
                                              load_parameters(options_.init, *m);
                                            return m;
                                          },
                                          grid_);
    if (leader() && !options_.init.empty())
      std::printf("initialized from %s%s\n", options_.init.c_str(),
                  reduction.enabled ? (", blocks " + nlohmann::json(reduction.teacher_layer).dump()).c_str() : "");
    if (c_.compression.quantizes()) quantization_ = std::make_unique<QuantizationSchedule>(c_.compression);
  }

  void resume_from_checkpoint() {
    if (!options_.resume.empty()) {
      const auto t0 = Clock::now();
      const std::string from = resume(options_.resume, checkpoint_dir(), *engine_, *grid_->world());
      if (leader() && !from.empty())
        std::printf("resumed from %s at step %lld in %.2f s\n", from.c_str(), (long long)engine_->global_step(),
                    std::chrono::duration<double>(Clock::now() - t0).count());
      TRIAD_CHECK(engine_->global_step() <= c_.steps,
                  "the checkpoint is at step " << engine_->global_step() << ", beyond the run's steps " << c_.steps);
    }
    first_step_ = engine_->global_step();
  }

  // The metrics file, the run's description, the model-state memory, monitors and profiler.
  void open_outputs() {
    if (leader() && !options_.metrics_path.empty()) {
      metrics_.open(options_.metrics_path, first_step_ > 0 ? std::ios::app : std::ios::trunc);
      TRIAD_CHECK(metrics_.good(), "cannot write the metrics file '" << options_.metrics_path << "'");
    }
    if (leader()) {
      const ModelShape shape = model_shape(c_);
      for (const std::string& notice : c_.notices) std::printf("note: %s\n", notice.c_str());
      std::printf("model: %s, %.2fM parameters (%s)\n", c_.arch.c_str(), double(shape.parameters) / 1e6,
                  shape.summary.c_str());
      std::printf("data: %s; batch %lld = %lld micro x %lld accumulation\n", data_->describe().c_str(),
                  (long long)c_.train_batch_size, (long long)c_.micro_batch_size,
                  (long long)c_.gradient_accumulation_steps);
    }
    std::fflush(stdout);
    // Model-state bytes resident on a rank, the maximum over ranks (constant over the run).
    if (world_) {
      const zero::ResidentBytes m = engine_->memory();
      Tensor v = Tensor::from_vector(std::vector<double>{double(m.param_bytes), double(m.grad_bytes),
                                                         double(m.optim_bytes), double(m.buffer_bytes),
                                                         double(m.host_bytes), double(m.nvme_bytes)},
                                     {6});
      world_->all_reduce(v, parallel::ReduceOp::max)->wait();
      const std::vector<double> b = v.to_vector<double>();
      mem_ = {{"param_bytes", b[0]}, {"grad_bytes", b[1]}, {"optim_bytes", b[2]},
              {"buffer_bytes", b[3]}, {"host_bytes", b[4]}, {"nvme_bytes", b[5]}};
    }
    start_ = Clock::now();
    if (leader() && c_.csv_monitor.enabled) monitors_.push_back(std::make_unique<CsvMonitor>(c_.csv_monitor));
    if (leader() && c_.tensorboard.enabled) monitors_.push_back(std::make_unique<TensorBoardMonitor>(c_.tensorboard));
    if (leader() && c_.flops_profiler.enabled && c_.flops_profiler.profile_step >= first_step_ &&
        c_.flops_profiler.profile_step < c_.steps)
      profiler_ = std::make_unique<FlopsProfiler>(engine_->model_ptr(), engine_->device());
    profiled_ = {.step = c_.flops_profiler.profile_step,
                 .world_size = n_ * c_.tensor_parallel * c_.pipeline.stages,
                 .data_parallel = n_,
                 .model_parallel = c_.tensor_parallel,
                 .micro_batch = c_.micro_batch_size};
  }

  void run_step(int64_t step) {
    stall_if_asked(step);
    if (quantization_)
      for (const std::string& line : quantization_->apply(engine_->model_ptr(), step))
        if (leader()) std::printf("%s\n", line.c_str());
    const auto t0 = Clock::now();
    const double waited_before = parallel::waited_seconds();
    const bool profiling = profiler_ && step == c_.flops_profiler.profile_step;
    const double forward_before = breakdown_.forward, backward_before = breakdown_.backward;
    Passes passes = forward_and_backward(step, profiling);
    const auto s0 = Clock::now();
    const StepResult r = engine_->step();
    const double s_ms = c_.wall_clock_breakdown || profiling ? phase_end(s0) : 0;
    if (c_.wall_clock_breakdown) breakdown_.optimizer += s_ms, ++breakdown_.steps;
    const double step_forward_ms = breakdown_.forward - forward_before;
    const double step_backward_ms = breakdown_.backward - backward_before;
    if (profiling) {
      profiled_.step_s = s_ms / 1e3;
      write_profile(profiler_->report(profiled_, c_.flops_profiler), c_.flops_profiler.output_file);
    }
    const double loss = mean_loss(passes.losses, step, r);
    // The rank that held the most (pipeline stages differ), for the metrics line alone: no
    // collective when there is none (metrics_path is the same on every rank).
    if (world_ && !options_.metrics_path.empty()) {
      Tensor peak = Tensor::full({1}, passes.activation_peak, DType::f64);
      world_->all_reduce(peak, parallel::ReduceOp::max)->wait();
      passes.activation_peak = peak.item();
    }
    const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const double busy_ms = step_ms - 1e3 * (parallel::waited_seconds() - waited_before);
    // Tokens per second over the job: this rank's count times the ranks (their padded
    // batches may differ a little in length).
    const double tps = double(passes.positions * n_) / (step_ms / 1e3);
    print_progress(r, loss, tps);
    nlohmann::json line = {{"step", r.step},           {"loss", loss},       {"lr", r.lr},
                           {"grad_norm", r.grad_norm}, {"step_ms", step_ms}, {"tokens_per_s", tps}};
    if (world_) line["mem"] = mem_, line["comm"] = r.comm;
    if (world_ && !options_.metrics_path.empty()) line["ranks"] = rank_times(busy_ms);
    if (!options_.metrics_path.empty())
      if (nlohmann::json moe = moe_metrics(engine_->model(), c_.arch == "llama" ? c_.llama.moe : c_.model.moe,
                                           model_shape(c_).n_layer, world_.get());
          !moe.is_null())
        line["moe"] = std::move(moe);
    line["mem"]["activation_peak_bytes"] = passes.activation_peak;
    if (c_.precision.dtype == DType::f16) line["loss_scale"] = r.loss_scale, line["skipped"] = r.skipped;
    if (r.step == c_.steps) engine_->apply_pending_update();  // the trained model is complete
    if ((c_.eval_interval > 0 && r.step % c_.eval_interval == 0) || r.step == c_.steps)
      line["val_loss"] = last_val_ = evaluate(r.step);
    write_monitors(r, loss, step_forward_ms, step_backward_ms, s_ms);
    if (!checkpoint_dir().empty() &&
        ((c_.checkpoint.every > 0 && r.step % c_.checkpoint.every == 0) || r.step == c_.steps)) {
      const std::string error = save_checkpoint_or_continue();
      if (!error.empty()) line["checkpoint_error"] = error;
    }
    if (metrics_.is_open()) {
      metrics_ << line.dump() << "\n";
      metrics_.flush();
    }
  }

  // The step's micro-batches through the engine, its pipeline schedule or one by one. The
  // activation peak is the most the device's allocator held during the passes beyond what
  // it held when the step began, which leaves out the model states and optimizer state.
  // What the passes allocate besides activations counts too: gradients not yet in their
  // buffers, ZeRO-3's gathered parameters, transients, and on the CPU the step's token batches.
  Passes forward_and_backward(int64_t step, bool profiling) {
    Allocator& device_memory = allocator_for(engine_->device());
    const size_t step_base = device_memory.bytes_in_use();
    device_memory.reset_peak();
    Passes passes;
    const auto micro_batch = [&](int64_t m) {  // this rank's rows of micro-batch m
      io::Batch b =
          data_->batch(step, c_.train_batch_size, (m * n_ + rank_) * c_.micro_batch_size, c_.micro_batch_size);
      passes.positions += b.inputs.numel();
      return b;
    };
    // The micro-batches' losses stay where they were computed until the step is done, then
    // come to the host in one copy: the host never waits for the device mid-step.
    if (engine_->pipelined()) {
      std::vector<Tensor> inputs, targets;
      for (int64_t m = 0; m < c_.gradient_accumulation_steps; ++m) {
        io::Batch b = micro_batch(m);
        inputs.push_back(b.inputs), targets.push_back(b.targets);
      }
      const auto f0 = Clock::now();
      passes.losses = engine_->forward_backward(inputs, targets);
      if (c_.wall_clock_breakdown) {  // the forward and backward actions' own time; the rest is waiting
        const double phase = phase_end(f0);
        double f = 0, b = 0;
        for (const parallel::ActionTiming& a : engine_->pipeline()->timings())
          (a.action.op == parallel::PipeOp::forward ? f : b) += (a.end - a.start - a.waited) * 1e3;
        breakdown_.forward += f, breakdown_.backward += b, breakdown_.pipe_wait += std::max(0.0, phase - f - b);
      }
    }
    for (int64_t m = 0; m < c_.gradient_accumulation_steps && !engine_->pipelined(); ++m) {
      const io::Batch b = micro_batch(m);
      const bool profile = profiling && m == 0;  // the first micro-batch, as DeepSpeed's profiler
      const bool timed = c_.wall_clock_breakdown || profile;
      if (profile) profiler_->start();
      const auto f0 = Clock::now();
      const Tensor loss = engine_->forward(b.inputs, b.targets);
      if (!passes.losses.defined())
        passes.losses = Tensor::empty({c_.gradient_accumulation_steps}, loss.dtype(), loss.device());
      ops::copy_(ops::select(passes.losses, 0, m), loss);
      const double f_ms = timed ? phase_end(f0) : 0;
      if (profile) profiler_->stop(), profiled_.forward_s = f_ms / 1e3;
      const auto b0 = Clock::now();
      engine_->backward(loss);
      const double b_ms = timed ? phase_end(b0) : 0;
      if (profile) profiled_.backward_s = b_ms / 1e3;
      if (c_.wall_clock_breakdown) breakdown_.forward += f_ms, breakdown_.backward += b_ms;
    }
    passes.activation_peak = double(device_memory.peak_bytes() - step_base);
    return passes;
  }

  // wall_clock_breakdown: the host waits for the device at each phase's end, so that the
  // phases' wall times are theirs (Note [Host synchronisation in a step]).
  double phase_end(Clock::time_point since) const {
    if (engine_->device().is_cuda()) cuda::synchronize(engine_->device().index);
    return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
  }

  // The straggler report, for the metrics line: the slowest and fastest rank by the time
  // each spent in the step less its waits for other ranks (parallel/watchdog.h; the whole
  // step time when comm_timeout is 0 and waits are not watched). Collective over the world.
  nlohmann::json rank_times(double busy_ms) const {
    Tensor all = Tensor::empty({world_->size()}, DType::f64);
    world_->all_gather(Tensor::full({1}, busy_ms, DType::f64), all)->wait();
    const std::vector<double> ms = all.to_vector<double>();
    const auto slowest = std::max_element(ms.begin(), ms.end()), fastest = std::min_element(ms.begin(), ms.end());
    return {{"slowest_rank", slowest - ms.begin()},
            {"slowest_ms", *slowest},
            {"fastest_rank", fastest - ms.begin()},
            {"fastest_ms", *fastest}};
  }

  // The step's mean loss over the global batch; Error when a loss or the gradient norm is
  // not finite.
  double mean_loss(const Tensor& losses, int64_t step, const StepResult& r) const {
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
    if (r.skipped && leader())
      std::printf("step %6lld: gradients overflowed, step skipped; loss scale now %g\n", (long long)r.step,
                  r.loss_scale);
    Tensor total = Tensor::full({1}, loss_sum, DType::f64);
    grid_->dp()->all_reduce(total)->wait();
    return total.item() / double(c_.gradient_accumulation_steps * n_);
  }

  // One line per log_interval steps (and the last), with wall_clock_breakdown's means.
  void print_progress(const StepResult& r, double loss, double tps) {
    if (!leader() || (r.step % c_.log_interval != 0 && r.step != c_.steps)) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double eta = elapsed / double(r.step - first_step_) * double(c_.steps - r.step);
    std::printf("step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %7.0f tok/s | %s elapsed, ETA %s\n",
                (long long)r.step, (long long)c_.steps, loss, r.lr, r.grad_norm, tps, duration_text(elapsed).c_str(),
                duration_text(eta).c_str());
    if (c_.wall_clock_breakdown) {
      const double steps = double(breakdown_.steps);
      std::printf("step %6lld | time (ms), mean of the last %lld steps, rank 0 | forward %.2f | backward %.2f | ",
                  (long long)r.step, (long long)breakdown_.steps, breakdown_.forward / steps,
                  breakdown_.backward / steps);
      if (engine_->pipelined()) std::printf("pipeline wait %.2f | ", breakdown_.pipe_wait / steps);
      std::printf("step %.2f\n", breakdown_.optimizer / steps);
      breakdown_ = {};
    }
    std::fflush(stdout);
  }

  // The mean validation loss over the data-parallel ranks (NaN without validation batches).
  double evaluate(int64_t step) {
    if (val_batches_.empty()) return NAN;
    Tensor total = Tensor::full({1}, engine_->evaluate(val_batches_), DType::f64);
    grid_->dp()->all_reduce(total)->wait();
    const double v = total.item() / double(n_);
    if (leader()) std::printf("step %6lld | val loss %.4f\n", (long long)step, v);
    std::fflush(stdout);
    return v;
  }

  // DeepSpeed's events (the lr: this step's).
  void write_monitors(const StepResult& r, double loss, double forward_ms, double backward_ms, double step_ms) {
    for (const std::unique_ptr<Monitor>& monitor : monitors_) {
      const int64_t samples = r.step * c_.train_batch_size;
      monitor->write("Train/Samples/train_loss", loss, samples);
      monitor->write("Train/Samples/lr", r.lr, samples);
      if (c_.precision.dtype == DType::f16) monitor->write("Train/Samples/loss_scale", r.loss_scale, samples);
      if (c_.wall_clock_breakdown) {
        monitor->write("Train/Samples/elapsed_time_ms_forward", forward_ms, samples);
        monitor->write("Train/Samples/elapsed_time_ms_backward", backward_ms, samples);
        monitor->write("Train/Samples/elapsed_time_ms_step", step_ms, samples);
      }
      monitor->flush();
    }
  }

  std::string save_checkpoint() {
    const auto t0 = Clock::now();
    const std::string path = save_to_dir(checkpoint_dir(), c_.checkpoint.keep, *engine_, *grid_->world());
    if (leader())
      std::printf("step %6lld | saved %s in %.2f s\n", (long long)engine_->global_step(), path.c_str(),
                  std::chrono::duration<double>(Clock::now() - t0).count());
    std::fflush(stdout);
    saved_step_ = engine_->global_step();
    saved_path_ = path;
    return path;
  }

  // A scheduled save; with checkpoint.on_error "continue", a failed save is printed on rank 0
  // and its message returned (every rank failed it together: checkpoint_dir.h) while training
  // goes on. "" when the save succeeded.
  std::string save_checkpoint_or_continue() {
    if (c_.checkpoint.on_error != "continue") {
      save_checkpoint();
      return "";
    }
    try {
      save_checkpoint();
      return "";
    } catch (const Error& e) {
      if (leader())
        std::printf("step %6lld | checkpoint failed, training continues (checkpoint.on_error): %s\n",
                    (long long)engine_->global_step(), e.what());
      std::fflush(stdout);
      return e.what();
    }
  }

  // Whether any rank caught a preemption signal (Note [Preemption]); the same answer on
  // every rank, so that all stop after the same step. Collective over the world.
  bool signalled_anywhere() const {
    Tensor flag = Tensor::full({1}, preemption_signal() != 0 ? 1.0 : 0.0, DType::f64);
    if (world_) world_->all_reduce(flag, parallel::ReduceOp::max)->wait();
    return flag.item() != 0.0;
  }

  // A checkpoint of the step just taken (unless the step wrote one), then Preempted.
  [[noreturn]] void stop_for_preemption() {
    if (leader()) std::printf("step %6lld | a preemption signal came: stopping\n", (long long)engine_->global_step());
    std::string path;
    if (!checkpoint_dir().empty()) path = saved_step_ == engine_->global_step() ? saved_path_ : save_checkpoint();
    throw Preempted(engine_->global_step(), path);
  }

  // The trained weights, output_dir/model.h5 (when output_dir is set).
  void save_model() {
    if (c_.output_dir.empty()) return;
    create_folder(c_.output_dir, *grid_->world());
    const std::string path = c_.output_dir + "/model.h5";
    const auto t0 = Clock::now();
    save_weights(path, *engine_, *grid_->world(), DType::f32);
    if (leader())
      std::printf("saved %s in %.2f s\n", path.c_str(), std::chrono::duration<double>(Clock::now() - t0).count());
  }

  bool leader() const { return !world_ || world_->rank() == 0; }
  std::string checkpoint_dir() const { return options_.save_dir.empty() ? c_.checkpoint.dir : options_.save_dir; }

  const TrainConfig& c_;
  const TrainOptions& options_;
  int64_t saved_step_ = -1;  // the step of the last checkpoint this run wrote, and where
  std::string saved_path_;
  parallel::CommunicatorPtr world_;  // null when run alone: the metrics then carry no mem or comm figures
  std::unique_ptr<TrainingData> data_;
  GridPtr grid_;
  int n_ = 1, rank_ = 0;  // data-parallel
  std::vector<std::pair<Tensor, Tensor>> val_batches_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<QuantizationSchedule> quantization_;  // compression_training's quantization-aware training
  int64_t first_step_ = 0;
  std::ofstream metrics_;
  nlohmann::json mem_;
  Clock::time_point start_;
  std::vector<std::unique_ptr<Monitor>> monitors_;
  std::unique_ptr<FlopsProfiler> profiler_;
  ProfiledStep profiled_;
  Breakdown breakdown_;
  double last_val_ = NAN;
};

}  // namespace

double train(const TrainConfig& c, const TrainOptions& options, parallel::CommunicatorPtr world,
             std::unique_ptr<TrainingData> data) {
  return TrainingRun(c, options, std::move(world), std::move(data)).run();
}

}  // namespace triad::engine
