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
#include "train/step_values.h"

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
// device only where it reads a value the device computes (Tensor::item, to_vector: counted
// by host_reads()). A training step reads nothing: the host queues step after step while
// the device computes, and reads at the log interval (DeepSpeed's steps_per_print).
// - What a step reports — its micro-batches' losses and its gradient norm — stays on the
//   device: StepValues (train/step_values.h) keeps each step's in a row of one device
//   buffer (copies queued, no wait), and read_steps() reads the rows of every step queued
//   since the last read in one copy. The data-parallel sum of the losses, and with metrics
//   the activation peak's maximum and the straggler report, are one collective each over
//   those steps, then each step is checked (a non-finite loss or norm names its step and
//   micro-batch, as when every step was read) and reported in order, exactly as it would
//   have been at its end: its metrics line (one per step, written at the read), its
//   monitors' events, the progress line of a log step.
// - The reads: at every log_interval-th step and the last; before validation
//   (eval_interval) and before a checkpoint (checkpoint.every, the preemption signal's):
//   a step's values are checked before anything is saved after it, so nothing is saved
//   after a non-finite step; and after kMostUnreadSteps unread steps, whatever the interval.
// - A step's step_ms is then the host's time in it: the device's work of the steps since
//   the last read shows in the read step's time; over the steps between two reads the sum
//   is the device's. The progress line's tokens per second are the mean since the previous
//   line.
// - The gradient norm: ZeroOptimizer::step leaves it on the device (its square is summed
//   there, ops::squared_norm, over the grid and the tensor-parallel parts; clipping reads it
//   there, ops::clip_to_norm_). fp16's overflow test reads it there too, where the update
//   runs on the device (Note [Loss scale on the device] in zero/device_loss_scale.h): the
//   update skips itself, the scale moves there, and the step's rate, verdict and new scale
//   are read with its values (StepValues). The host reads the norm before the update where
//   the update or the norm runs on the host: gradients kept by an offloading store, an
//   update on the host (offload), the delayed update, and SGD in one process. The host reads
//   the loss scale itself (it waits) only for ZeRO's counters before a save.
//   MPI collectives of device tensors wait for their copy to the host; over NCCL they are
//   queued on the device.
// - With wall_clock_breakdown or at the flops profiler's step the host waits at every
//   phase's end (phase_end): those time the device's phases, which a wait alone makes
//   measurable. With metrics and MoE layers, moe_metrics reads the layers' totals every step.
//   With stop_on_signal the ranks agree on a preemption signal after every step: a
//   collective of a host flag, which waits for no device.
// Batches go to the device through pinned staging buffers without a wait (cuda/transfer.cu)
// and the optimizer is one launch (Note [Multi-tensor optimizer]). Ranks that share a GPU
// reach each other through host memory (MPI), and each such collective waits for its copy
// to the host. Under pipeline parallelism the last stage's losses go to the pipeline's
// ranks as a device tensor (Engine::forward_backward): over NCCL a broadcast queued on the
// device; over MPI it waits for its copy to the host, as any MPI collective of device
// tensors.

// This rank's forward and backward passes of one step.
struct Passes {
  Tensor losses;               // the micro-batches' losses (gradient_accumulation_steps,), where computed
  int64_t positions = 0;       // this rank's input positions (padding included) over the micro-batches
  double activation_peak = 0;  // bytes (metrics mem.activation_peak_bytes)
};

// A step queued but not read yet (Note [Host synchronisation in a step]): its host-side
// figures; its losses and gradient norm wait on the device (StepValues).
struct PendingStep {
  QueuedStep queued;  // its grad_norm moved to the StepValues; comm kept with metrics only
  Clock::time_point start;
  double waited_before = 0;                                  // parallel::waited_seconds() at its start
  double step_ms = 0;                                        // host time from its start to its end, or to its read
  double busy_ms = 0;                                        // step_ms less the waits for other ranks
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;  // wall_clock_breakdown, flops profiler
  int64_t positions = 0;
  double activation_peak = 0;
  nlohmann::json moe;  // with metrics
};

// Steps left unread at most, whatever log_interval: a long interval keeps a bounded record.
constexpr int64_t kMostUnreadSteps = 1000;

constexpr const char* kDivergedAdvice = "; lower optimizer.params.lr or set gradient_clipping; nothing was saved";

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
    PendingStep p;
    p.start = Clock::now(), p.waited_before = parallel::waited_seconds();
    const bool profiling = profiler_ && step == c_.flops_profiler.profile_step;
    const double forward_before = breakdown_.forward, backward_before = breakdown_.backward;
    Passes passes;
    if (c_.cuda_graph.enabled) {
      passes = whole_step(step, p.queued);
    } else {
      passes = forward_and_backward(step, profiling);
      const auto s0 = Clock::now();
      p.queued = engine_->queue_step();
      p.optimizer_ms = c_.wall_clock_breakdown || profiling ? phase_end(s0) : 0;
    }
    if (c_.wall_clock_breakdown) breakdown_.optimizer += p.optimizer_ms, ++breakdown_.steps;
    p.forward_ms = breakdown_.forward - forward_before;
    p.backward_ms = breakdown_.backward - backward_before;
    if (profiling) {
      profiled_.step_s = p.optimizer_ms / 1e3;
      write_profile(profiler_->report(profiled_, c_.flops_profiler), c_.flops_profiler.output_file);
    }
    if (!step_values_)
      step_values_ =
          std::make_unique<StepValues>(c_.gradient_accumulation_steps, p.queued.outcome.defined(),
                                       std::min<int64_t>(c_.log_interval, kMostUnreadSteps), engine_->device());
    step_values_->keep(passes.losses, p.queued.grad_norm, p.queued.outcome);
    p.queued.grad_norm = p.queued.outcome = Tensor();  // (kept by step_values_)
    p.positions = passes.positions, p.activation_peak = passes.activation_peak;
    if (options_.metrics_path.empty()) {
      p.queued.comm = nullptr;  // for the metrics line alone
    } else {
      p.moe = moe_metrics(engine_->model(), c_.arch == "llama" ? c_.llama.moe : c_.model.moe, model_shape(c_).n_layer,
                          world_.get());
    }
    end_timing(p);
    const int64_t done = p.queued.step;
    pending_.push_back(std::move(p));
    if (done == c_.steps) engine_->apply_pending_update();  // the trained model is complete
    if (done % c_.log_interval == 0 || done == c_.steps || evaluates(done) || saves(done) || step_values_->full())
      read_steps();
  }

  bool evaluates(int64_t step) const {
    return (c_.eval_interval > 0 && step % c_.eval_interval == 0) || step == c_.steps;
  }
  bool saves(int64_t step) const {
    return !checkpoint_dir().empty() &&
           ((c_.checkpoint.every > 0 && step % c_.checkpoint.every == 0) || step == c_.steps);
  }

  // A step's host time so far, and that time less its waits for other ranks.
  static void end_timing(PendingStep& p) {
    p.step_ms = std::chrono::duration<double, std::milli>(Clock::now() - p.start).count();
    p.busy_ms = p.step_ms - 1e3 * (parallel::waited_seconds() - p.waited_before);
  }

  // Note [Host synchronisation in a step]: reads the steps queued since the last read (the
  // host waits for the device here, once), then for each in order checks its losses and
  // gradient norm and reports it as it would have been reported at its end: the progress
  // line, validation, monitors, checkpoint and metrics line. The collectives the reports
  // need (the loss over data-parallel ranks; with metrics, the activation peak and the
  // straggler report over the world) run once for all the steps, on every rank, before any
  // check: every rank stops at the same step.
  void read_steps() {
    if (pending_.empty()) return;
    std::vector<PendingStep> steps = std::move(pending_);
    pending_.clear();
    const std::vector<double> values = step_values_->read();
    end_timing(steps.back());  // the wait for the device is the last step's
    const size_t count = steps.size();
    const size_t row = size_t(step_values_->row_width()), micro = size_t(c_.gradient_accumulation_steps);
    std::vector<double> loss_sums(count, 0.0), peaks(count), busy(count);
    for (size_t k = 0; k < count; ++k) {
      for (size_t m = 0; m < micro; ++m) loss_sums[k] += values[k * row + m];
      peaks[k] = steps[k].activation_peak, busy[k] = steps[k].busy_ms;
    }
    Tensor totals = Tensor::from_vector(loss_sums, {int64_t(count)});
    grid_->dp()->all_reduce(totals)->wait();
    const std::vector<double> sums = totals.to_vector<double>();
    // The rank that held the most (pipeline stages differ) and the straggler report, for
    // the metrics line alone: no collective when there is none (metrics_path is the same on
    // every rank).
    std::vector<nlohmann::json> ranks(count);
    if (world_ && !options_.metrics_path.empty()) {
      Tensor most = Tensor::from_vector(peaks, {int64_t(count)});
      world_->all_reduce(most, parallel::ReduceOp::max)->wait();
      peaks = most.to_vector<double>();
      ranks = rank_times(busy);
    }
    for (size_t k = 0; k < count; ++k) {
      const PendingStep& p = steps[k];
      const double* v = values.data() + k * row;  // the losses, the norm, the outcome
      const double loss = sums[k] / double(c_.gradient_accumulation_steps * n_);
      StepResult r{p.queued.step, p.queued.lr, v[micro], false, 1.0, p.queued.comm};
      if (row > micro + 1) read_outcome(v + micro + 1, r);
      check_finite(r, v, loss);
      report(p, r, loss, peaks[k], std::move(ranks[k]));
    }
  }

  // Error when a micro-batch's loss, the step's mean loss (another rank's micro-batch) or
  // the gradient norm of an update is not finite.
  void check_finite(const StepResult& r, const double* micro_losses, double loss) const {
    for (int64_t m = 0; m < c_.gradient_accumulation_steps; ++m)
      TRIAD_CHECK(std::isfinite(micro_losses[m]), "[train] the loss is " << micro_losses[m] << " at step " << r.step
                                                                         << " (micro-batch " << m << ")"
                                                                         << kDivergedAdvice);
    TRIAD_CHECK(std::isfinite(loss), "[train] the loss is " << loss << " at step " << r.step
                                                            << " (on another data-parallel rank)" << kDivergedAdvice);
    TRIAD_CHECK(r.skipped || std::isfinite(r.grad_norm),
                "[train] the gradient norm is " << r.grad_norm << " at step " << r.step << "; nothing was saved");
  }

  // What a step reports once read: the progress line (one per log_interval steps and the
  // last), validation, the monitors' events, a checkpoint and the metrics line.
  void report(const PendingStep& p, const StepResult& r, double loss, double activation_peak, nlohmann::json ranks) {
    if (r.skipped && leader())
      std::printf("step %6lld: gradients overflowed, step skipped; loss scale now %g\n", (long long)r.step,
                  r.loss_scale);
    // Tokens per second over the job: this rank's count times the ranks (their padded
    // batches may differ a little in length).
    const double tokens = double(p.positions * n_);
    since_progress_.tokens += tokens, since_progress_.ms += p.step_ms;
    print_progress(r, loss);
    nlohmann::json line = {{"step", r.step},       {"loss", loss},
                           {"lr", r.lr},           {"grad_norm", r.grad_norm},
                           {"step_ms", p.step_ms}, {"tokens_per_s", tokens / (p.step_ms / 1e3)}};
    if (world_) line["mem"] = mem_, line["comm"] = r.comm;
    if (!ranks.is_null()) line["ranks"] = std::move(ranks);
    if (!p.moe.is_null()) line["moe"] = p.moe;
    line["mem"]["activation_peak_bytes"] = activation_peak;
    if (c_.precision.dtype == DType::f16) line["loss_scale"] = r.loss_scale, line["skipped"] = r.skipped;
    if (evaluates(r.step)) line["val_loss"] = last_val_ = evaluate(r.step);
    write_monitors(r, loss, p.forward_ms, p.backward_ms, p.optimizer_ms);
    if (saves(r.step)) {
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
    const PeakWindow window(engine_->device());
    Passes passes;
    // The micro-batches' losses stay where they were computed (StepValues keeps them there
    // until the trainer reads them): the host never waits for the device mid-step.
    if (engine_->pipelined()) {
      const auto [inputs, targets] = step_batches(step, passes);
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
      const io::Batch b = rows_of(step, m);
      passes.positions += b.inputs.numel();
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
    passes.activation_peak = window.bytes();
    return passes;
  }

  // The activation peak (Passes::activation_peak): the most the device's allocator holds
  // from the window's start on beyond what it held then.
  struct PeakWindow {
    Allocator& memory;
    size_t base;
    explicit PeakWindow(Device device) : memory(allocator_for(device)), base(memory.bytes_in_use()) {
      memory.reset_peak();
    }
    double bytes() const { return double(memory.peak_bytes() - base); }
  };

  // This rank's rows of the step's micro-batch m.
  io::Batch rows_of(int64_t step, int64_t m) const {
    return data_->batch(step, c_.train_batch_size, (m * n_ + rank_) * c_.micro_batch_size, c_.micro_batch_size);
  }

  // This rank's rows of every micro-batch of the step, as inputs and targets; their
  // positions counted in passes.
  std::pair<std::vector<Tensor>, std::vector<Tensor>> step_batches(int64_t step, Passes& passes) const {
    std::vector<Tensor> inputs, targets;
    for (int64_t m = 0; m < c_.gradient_accumulation_steps; ++m) {
      io::Batch b = rows_of(step, m);
      passes.positions += b.inputs.numel();
      inputs.push_back(b.inputs), targets.push_back(b.targets);
    }
    return {inputs, targets};
  }

  // The step's micro-batches, passes and update in one call (Engine::train_step), which
  // records the step and replays it (Note [Recorded steps] in engine/step_recording.h).
  Passes whole_step(int64_t step, QueuedStep& queued) {
    const PeakWindow window(engine_->device());
    Passes passes;
    const auto [inputs, targets] = step_batches(step, passes);
    TrainStep s = engine_->train_step(inputs, targets);
    passes.losses = s.losses;
    passes.activation_peak = s.activation_peak.value_or(window.bytes());
    queued = std::move(s.queued);
    return passes;
  }

  // wall_clock_breakdown: the host waits for the device at each phase's end, so that the
  // phases' wall times are theirs (Note [Host synchronisation in a step]).
  double phase_end(Clock::time_point since) const {
    if (engine_->device().is_cuda()) cuda::synchronize(engine_->device().index);
    return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
  }

  // The straggler reports, for the metrics lines: per step, the slowest and fastest rank
  // by the time each spent in the step less its waits for other ranks (parallel/watchdog.h;
  // the whole step time when comm_timeout is 0 and waits are not watched), from this rank's
  // times of the steps (busy_ms). One collective over the world.
  std::vector<nlohmann::json> rank_times(const std::vector<double>& busy_ms) const {
    const size_t steps = busy_ms.size(), ranks = size_t(world_->size());
    Tensor all = Tensor::empty({int64_t(ranks * steps)}, DType::f64);
    world_->all_gather(Tensor::from_vector(busy_ms, {int64_t(steps)}), all)->wait();
    const std::vector<double> gathered = all.to_vector<double>();  // rank by rank
    std::vector<nlohmann::json> out;
    for (size_t k = 0; k < steps; ++k) {
      std::vector<double> ms(ranks);
      for (size_t w = 0; w < ranks; ++w) ms[w] = gathered[w * steps + k];
      const auto slowest = std::max_element(ms.begin(), ms.end()), fastest = std::min_element(ms.begin(), ms.end());
      out.push_back({{"slowest_rank", slowest - ms.begin()},
                     {"slowest_ms", *slowest},
                     {"fastest_rank", fastest - ms.begin()},
                     {"fastest_ms", *fastest}});
    }
    return out;
  }

  // One line per log_interval steps (and the last), with wall_clock_breakdown's means; the
  // tokens per second over the steps since the previous line.
  void print_progress(const StepResult& r, double loss) {
    if (r.step % c_.log_interval != 0 && r.step != c_.steps) return;
    const double tps = since_progress_.tokens / (since_progress_.ms / 1e3);
    since_progress_ = {};
    if (!leader()) return;
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
    read_steps();  // (a non-finite step stops here: nothing is saved after it)
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
  std::vector<PendingStep> pending_;         // the steps queued since the last read_steps()
  std::unique_ptr<StepValues> step_values_;  // their losses and gradient norms, on the device
  struct {
    double tokens = 0, ms = 0;
  } since_progress_;  // the steps' since the last progress line
  double last_val_ = NAN;
};

}  // namespace

double train(const TrainConfig& c, const TrainOptions& options, parallel::CommunicatorPtr world,
             std::unique_ptr<TrainingData> data) {
  return TrainingRun(c, options, std::move(world), std::move(data)).run();
}

}  // namespace triad::engine
