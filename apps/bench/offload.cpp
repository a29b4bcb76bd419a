#include "bench/offload.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "common/report.h"
#include "parallel/self_communicator.h"
#include "triad.h"
#include "zero/zero_optimizer.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Raw direct I/O of `bytes` from `data` at offset 0, block by block on this thread.
void raw_transfer(int fd, bool write, char* data, int64_t bytes, int64_t block, const std::string& path) {
  for (int64_t done = 0; done < bytes;) {
    const size_t n = size_t(std::min(block, bytes - done));
    const ssize_t got = write ? ::pwrite(fd, data + done, n, done) : ::pread(fd, data + done, n, done);
    TRIAD_CHECK(got > 0, "raw " << (write ? "write" : "read") << " of '" << path << "' failed: " << std::strerror(errno));
    done += got;
  }
}

struct StepRun {
  double seconds = 0;  // median step
  double loss = 0;     // the last step's
  zero::ParamSwap::ReadTimes reads;  // the parameter shards' (offloaded), over the timed steps
};

// Where the step's state lives: memory; parameters and optimizer state on NVMe; the
// optimizer state alone, with and without the delayed parameter update.
enum class Placement { memory, nvme, optimizer_nvme, optimizer_nvme_delayed };

// Stage 3 on one rank: `steps` timed steps (after one untimed) of a GPT on fixed tokens.
StepRun time_steps(const OffloadBenchOptions& o, Placement placement) {
  const int64_t seq = 64, batch = 8, vocab = 512;
  auto model = std::make_shared<nn::GPT>(nn::GPTConfig{.n_layer = o.n_layer, .n_head = 4, .d_model = o.d_model,
                                                       .seq_len = seq, .vocab_size = vocab, .init_seed = 5});
  zero::ZeroConfig config{.stage = 3, .stage3_param_persistence_threshold = 0, .aio = o.aio};
  if (placement != Placement::memory)
    config.offload_optimizer = {.device = zero::OffloadDevice::nvme, .nvme_path = o.dir, .pipeline_read = true,
                                .pipeline_write = true};
  if (placement == Placement::nvme) config.offload_param = {.device = zero::OffloadDevice::nvme, .nvme_path = o.dir};
  config.delayed_update = {.enabled = placement == Placement::optimizer_nvme_delayed, .warmup_steps = 0};
  zero::ZeroOptimizer opt(model, config, {.lr = 1e-3}, 0.1, std::make_shared<parallel::SelfCommunicator>());
  Generator gen(7);
  Tensor u = Tensor::empty({batch, seq + 1});
  ops::uniform_(u, 0.0, double(vocab) - 0.001, gen);
  const std::vector<float> f = u.to_vector<float>();
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>(f.begin(), f.end()), {batch, seq + 1});
  const Tensor x = ops::contiguous(ops::narrow(tokens, 1, 0, seq)), y = ops::contiguous(ops::narrow(tokens, 1, 1, seq));
  StepRun run;
  std::vector<double> times;
  zero::ParamSwap::ReadTimes untimed;
  for (int s = 0; s <= o.steps; ++s) {
    if (s == 1 && opt.param_swap()) untimed = opt.param_swap()->read_times();
    const double t = seconds_of([&] {
      const Tensor loss = model->loss(x, y);
      run.loss = loss.item();
      opt.begin_backward(true);
      backward(loss);
      opt.step(1e-3, 1.0);
    });
    if (s > 0) times.push_back(t);
  }
  run.seconds = app::median(times);
  if (opt.param_swap()) {
    run.reads = opt.param_swap()->read_times();
    run.reads.reads -= untimed.reads;
    run.reads.read_seconds -= untimed.read_seconds;
    run.reads.waited_seconds -= untimed.waited_seconds;
  }
  return run;
}

}  // namespace

int run_offload_bench(const OffloadBenchOptions& o) {
  io::check_aio(o.aio);
  const int threads = app::set_threads(o.threads);
  const int64_t bytes = io::align_up(o.megabytes << 20);
  const io::AlignedBuffer buffer = io::aligned_buffer(bytes);
  std::memset(buffer.get(), 0x5a, size_t(bytes));
  char* data = static_cast<char*>(buffer.get());
  std::vector<double> swap_w, swap_r, raw_w, raw_r;
  {
    io::SwapFile swap((std::filesystem::path(o.dir) / "triad-bench-swap.swp").string(), bytes, o.aio);
    const std::string raw_path = (std::filesystem::path(o.dir) / "triad-bench-raw.swp").string();
    const int fd = ::open(raw_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    TRIAD_CHECK(fd >= 0, "cannot open '" << raw_path << "' with O_DIRECT: " << std::strerror(errno));
    for (int r = 0; r < o.repeats; ++r) {  // interleaved, so both see the same device state
      swap_w.push_back(seconds_of([&] { swap.write(0, data, bytes); }));
      raw_w.push_back(seconds_of([&] { raw_transfer(fd, true, data, bytes, o.aio.block_size, raw_path); }));
      swap_r.push_back(seconds_of([&] { swap.read(0, data, bytes); }));
      raw_r.push_back(seconds_of([&] { raw_transfer(fd, false, data, bytes, o.aio.block_size, raw_path); }));
    }
    ::close(fd);
    std::filesystem::remove(raw_path);
  }
  const double gb = double(bytes) / 1e9;
  const double sw = gb / app::median(swap_w), sr = gb / app::median(swap_r), rw = gb / app::median(raw_w),
               rr = gb / app::median(raw_r);
  const StepRun memory = time_steps(o, Placement::memory), nvme = time_steps(o, Placement::nvme);
  const StepRun optimizer = time_steps(o, Placement::optimizer_nvme),
                delayed = time_steps(o, Placement::optimizer_nvme_delayed);

  std::printf("triad-bench offload: %s, %.0f MiB per transfer, block %lld, queue depth %lld, %lld thread(s) per "
              "transfer; %d OpenMP threads\n",
              o.dir.c_str(), double(bytes) / 1048576.0, (long long)o.aio.block_size, (long long)o.aio.queue_depth,
              (long long)o.aio.intra_op_parallelism, threads);
  std::printf("%-8s %14s %14s %10s\n", "", "swap GB/s", "raw GB/s", "swap/raw");
  std::printf("%-8s %14.3f %14.3f %10.3f\n", "write", sw, rw, sw / rw);
  std::printf("%-8s %14.3f %14.3f %10.3f\n", "read", sr, rr, sr / rr);
  std::printf("ZeRO-3 step (GPT L%lld C%lld): in memory %.4f s, parameters and optimizer on NVMe %.4f s (x%.3f); "
              "last losses %.6f and %.6f\n",
              (long long)o.n_layer, (long long)o.d_model, memory.seconds, nvme.seconds, nvme.seconds / memory.seconds,
              memory.loss, nvme.loss);
  const zero::ParamSwap::ReadTimes& r = nvme.reads;
  const double hidden = r.read_seconds > 0 ? 1.0 - r.waited_seconds / r.read_seconds : 0.0;
  std::printf(
      "parameter shards: %lld reads over %d steps, %.4f s reading, %.4f s of it waited for on the training "
      "thread (%.0f%% hidden behind compute)\n",
      (long long)r.reads, o.steps, r.read_seconds, r.waited_seconds, 100.0 * hidden);
  std::printf("optimizer on NVMe alone %.4f s, with the delayed parameter update %.4f s (x%.3f)\n", optimizer.seconds,
              delayed.seconds, delayed.seconds / optimizer.seconds);
  app::print_json_line({{"bench", "offload"},
                        {"dir", o.dir},
                        {"bytes", bytes},
                        {"block_size", o.aio.block_size},
                        {"queue_depth", o.aio.queue_depth},
                        {"intra_op_parallelism", o.aio.intra_op_parallelism},
                        {"swap_write_gb_per_s", sw},
                        {"swap_read_gb_per_s", sr},
                        {"raw_write_gb_per_s", rw},
                        {"raw_read_gb_per_s", rr},
                        {"write_ratio", sw / rw},
                        {"read_ratio", sr / rr},
                        {"step_seconds_memory", memory.seconds},
                        {"step_seconds_nvme", nvme.seconds},
                        {"step_ratio", nvme.seconds / memory.seconds},
                        {"param_reads", r.reads},
                        {"param_read_seconds", r.read_seconds},
                        {"param_read_waited_seconds", r.waited_seconds},
                        {"param_read_hidden", hidden},
                        {"step_seconds_optimizer_nvme", optimizer.seconds},
                        {"step_seconds_delayed_update", delayed.seconds},
                        {"loss_memory", memory.loss},
                        {"loss_nvme", nvme.loss}});
  return 0;
}

}  // namespace triad::bench
