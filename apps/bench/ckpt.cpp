#include "bench/ckpt.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <utility>

#include "bench/workers.h"
#include "common/report.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "engine/engine.h"
#include "io/checksum.h"
#include "parallel/runtime.h"
#include "triad.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;
using State = zero::ZeroOptimizer::State;

constexpr State kStates[] = {State::param, State::master, State::exp_avg, State::exp_avg_sq};
constexpr int64_t kChunkBytes = int64_t(64) << 20;  // the plain path's largest pwrite/pread
constexpr double kTargetRatio = 0.7;                // checkpoint GB/s over plain GB/s, at least
constexpr double GB = 1e9;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The preset with AdamW, one sequence per rank for the one step taken, and ZeRO stage 1 on
// more than one rank (the optimizer state sharded; one rank runs stage 0 anyway).
engine::TrainConfig make_config(const std::string& model, int ranks) {
  nlohmann::json json = preset_config_json(model);
  json["train_batch_size"] = ranks;
  json["steps"] = 1;
  json["zero_optimization"]["stage"] = ranks > 1 ? 1 : 0;
  return engine::parse_config(json, ranks);
}

// ---------------------------------------------------------------------------------------
// System calls, every result checked.

[[noreturn]] void fail_errno(const std::string& what, const std::string& path, int err) {
  throw Error("triad-bench ckpt: " + what + " '" + path + "' failed: " + std::strerror(err));
}

// An open file descriptor. close() reports errors (a failed write-back can surface there);
// the destructor, on error paths only, closes silently.
class Fd {
 public:
  Fd(const std::string& path, int flags) : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) fail_errno("opening", path, errno);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  const std::string& path() const { return path_; }
  void close() {
    if (::close(std::exchange(fd_, -1)) != 0) fail_errno("closing", path_, errno);
  }

 private:
  std::string path_;
  int fd_;
};

// Writes `count` bytes at `offset` in calls of at most chunk.size() bytes; the byte at
// position p (from offset) is chunk[p % chunk.size()].
void pwrite_all(const Fd& f, const std::vector<unsigned char>& chunk, int64_t offset, int64_t count) {
  const int64_t size = int64_t(chunk.size());
  for (int64_t done = 0; done < count;) {
    const int64_t at = done % size, want = std::min(count - done, size - at);
    const ssize_t k = ::pwrite(f.get(), chunk.data() + at, size_t(want), off_t(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail_errno("writing", f.path(), errno);
    done += k;
  }
}

// Reads `count` bytes at `offset` into buffer, position p to buffer[p % buffer.size()].
void pread_all(const Fd& f, std::vector<unsigned char>& buffer, int64_t offset, int64_t count) {
  const int64_t size = int64_t(buffer.size());
  for (int64_t done = 0; done < count;) {
    const int64_t at = done % size, want = std::min(count - done, size - at);
    const ssize_t k = ::pread(f.get(), buffer.data() + at, size_t(want), off_t(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail_errno("reading", f.path(), errno);
    TRIAD_CHECK(k > 0, "triad-bench ckpt: '" << f.path() << "' ends at byte " << offset + done << ", expected "
                                             << offset + count << " bytes");
    done += k;
  }
}

void fsync_file(const Fd& f) {
  if (::fsync(f.get()) != 0) fail_errno("syncing", f.path(), errno);
}

// Removes `path` if it exists.
void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail_errno("removing", path, errno);
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail_errno("reading the size of", path, errno);
  return int64_t(st.st_size);
}

// Evicts the file's pages from the page cache, so that the next read comes from storage.
// Only clean pages are evicted: call it after the file was synced.
void drop_cached_pages(const std::string& path) {
  Fd f(path, O_RDONLY);
  const int rc = ::posix_fadvise(f.get(), 0, 0, POSIX_FADV_DONTNEED);  // returns the error number
  if (rc != 0) fail_errno("posix_fadvise(DONTNEED) on", path, rc);
  f.close();
}

// The fraction of the file's pages in the page cache (mincore over a mapping of the file,
// which touches no page).
double cached_fraction(const std::string& path) {
  Fd f(path, O_RDONLY);
  const int64_t size = file_size(path);
  if (size == 0) return 0.0;
  void* map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, f.get(), 0);
  if (map == MAP_FAILED) fail_errno("mapping", path, errno);
  const int64_t page = ::sysconf(_SC_PAGESIZE), pages = (size + page - 1) / page;
  std::vector<unsigned char> resident(size_t(pages), 0);
  const int rc = ::mincore(map, size_t(size), resident.data());
  const int err = errno;
  if (::munmap(map, size_t(size)) != 0) fail_errno("unmapping", path, errno);
  if (rc != 0) fail_errno("mincore on", path, err);
  f.close();
  const auto cached = std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; });
  return double(cached) / double(pages);
}

// rchar or wchar of /proc/self/io: bytes this process passed through read or write
// system calls (all threads); -1 where the kernel does not account them.
int64_t syscall_io_bytes(const std::string& field) {
  std::ifstream in("/proc/self/io");
  for (std::string key; in >> key;) {
    int64_t value = 0;
    if (!(in >> value)) break;
    if (key == field + ":") return value;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// Worker: one rank count under mpirun.

struct Timing {
  double seconds;        // from a barrier to the slowest rank's end
  double syscall_bytes;  // all ranks' read or write system-call bytes meanwhile (-1: unknown)
};

// Times `body` on every rank (collective). io_field is "rchar" or "wchar".
Timing timed(parallel::Communicator& world, const std::string& io_field, const std::function<void()>& body) {
  world.barrier();
  const int64_t io0 = syscall_io_bytes(io_field);
  const auto t0 = Clock::now();
  body();
  const double seconds = seconds_since(t0);
  const int64_t io1 = syscall_io_bytes(io_field);
  const bool known = io0 >= 0 && io1 >= 0;
  const std::vector<double> mx = max_over_ranks(world, {seconds, known ? 0.0 : 1.0});
  Tensor bytes = Tensor::full({1}, known ? double(io1 - io0) : 0.0, DType::f64);
  world.all_reduce(bytes)->wait();
  return {mx[0], mx[1] > 0 ? -1.0 : bytes.item()};
}

// One optimizer step on a tiny random batch (one sequence of 8 tokens per rank), so that
// the moments the checkpoint holds are not all zero.
void take_one_step(engine::Engine& engine, int rank) {
  const int64_t T = 8, V = engine.config().model.vocab_size;
  const Tensor tokens = random_token_ids(1, T + 1, V, uint64_t(101 + rank));
  const Tensor x = ops::contiguous(ops::narrow(tokens, 1, 0, T)), y = ops::contiguous(ops::narrow(tokens, 1, 1, T));
  engine.backward(engine.forward(x, y));
  engine.step();
}

// The checksum (io/checksum.h) of every slice of model and optimizer state this rank keeps.
std::vector<uint64_t> resident_checksums(engine::Engine& engine) {
  std::vector<uint64_t> out;
  for (State state : kStates)
    for (const auto& slice : engine.zero()->state_view(state).resident_slices())
      out.push_back(io::tensor_checksum(slice.values, slice.first));
  return out;
}

// Zeroes the state this rank keeps, so that a load must restore every element of it.
void clear_resident_state(engine::Engine& engine) {
  for (State state : kStates) {
    zero::ZeroOptimizer::StateView view = engine.zero()->state_view(state);
    for (const auto& slice : view.resident_slices()) ops::zero_(slice.values);
    view.commit();
  }
}

// Every rank must have got back what it had (collective).
void check_restored(parallel::Communicator& world, engine::Engine& engine, const std::vector<uint64_t>& saved,
                    const std::string& path) {
  const bool same = resident_checksums(engine) == saved;
  TRIAD_CHECK(max_over_ranks(world, {same ? 0.0 : 1.0})[0] == 0.0,
              "triad-bench ckpt: load_checkpoint('" << path << "') did not restore the state that was saved"
                                                    << (same ? " on another rank" : ""));
}

// The plain path's buffers: a chunk of arbitrary bytes to write, and one to read into.
struct PlainBuffers {
  std::vector<unsigned char> out, in;
  explicit PlainBuffers(int64_t bytes) : out(size_t(std::max<int64_t>(1, bytes))), in(out.size(), 0) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (unsigned char& b : out) x = x * 6364136223846793005ull + 1442695040888963407ull, b = (unsigned char)(x >> 56);
  }
};

// Rank r's share of `bytes`: [r * (bytes / n), ...), the last rank taking the remainder.
std::pair<int64_t, int64_t> share_of(int64_t bytes, int rank, int n) {
  const int64_t each = bytes / n;
  return {rank * each, rank == n - 1 ? bytes - (n - 1) * each : each};
}

void plain_write(const std::string& path, int64_t bytes, int rank, int n, const PlainBuffers& buf) {
  const auto [offset, count] = share_of(bytes, rank, n);
  Fd f(path, O_WRONLY | O_CREAT);  // every rank opens the one file; none truncates it
  pwrite_all(f, buf.out, offset, count);
  fsync_file(f);
  f.close();
}

void plain_read(const std::string& path, int64_t bytes, int rank, int n, PlainBuffers& buf) {
  const auto [offset, count] = share_of(bytes, rank, n);
  Fd f(path, O_RDONLY);
  pread_all(f, buf.in, offset, count);
  f.close();
}

// Reading back, every position p of a share lands at in[p % size], where out[p % size] was
// written: the buffer's touched prefix must match.
void check_plain_read(parallel::Communicator& world, int64_t bytes, int rank, int n, const PlainBuffers& buf,
                      const std::string& path) {
  const int64_t touched = std::min<int64_t>(share_of(bytes, rank, n).second, int64_t(buf.in.size()));
  const bool same = std::memcmp(buf.in.data(), buf.out.data(), size_t(touched)) == 0;
  TRIAD_CHECK(max_over_ranks(world, {same ? 0.0 : 1.0})[0] == 0.0,
              "triad-bench ckpt: reading '" << path << "' back gave other bytes than were written"
                                            << (same ? " on another rank" : ""));
}

// Rank 0 runs `f` (a file operation); the others wait for it (collective). An error on
// rank 0 aborts the job (main_guard), so the others cannot hang.
void on_rank0(parallel::Communicator& world, const std::function<void()>& f) {
  if (world.rank() == 0) f();
  world.barrier();
}

struct Samples {
  std::vector<double> save, load, write, read;                       // seconds, per repeat
  std::vector<double> save_io, load_io, write_io, read_io;           // syscall bytes, per repeat
  std::vector<double> cached_before_load, cached_before_plain_read;  // fractions, per repeat
};

// One repeat of the four timings, appended to s. Returns the checkpoint's size in bytes;
// `previous_bytes` is the one before (0 in the first repeat). Odd repeats run the plain path first: a file system (or a thinly provisioned disk) can be
// faster for blocks a moment ago freed than for fresh ones, which would favour whichever
// path always ran second.
int64_t run_repeat(parallel::Communicator& world, engine::Engine& engine, const CkptOptions& o,
                   const std::vector<uint64_t>& saved, PlainBuffers& buf, Samples& s, int repeat,
                   int64_t previous_bytes) {
  const int n = world.size(), rank = world.rank();
  const std::string ckpt = o.dir + "/checkpoint.h5", plain = o.dir + "/plain.bin";
  double cached = 0;
  const auto before_read = [&](const std::string& path) {
    on_rank0(world, [&] {
      if (!o.cached) drop_cached_pages(path);
      cached = cached_fraction(path);
    });
  };

  int64_t bytes = -1;
  Timing save, load, write, read;
  const auto checkpoint_path = [&] {
    on_rank0(world, [&] { remove_file(ckpt); });
    save = timed(world, "wchar", [&] { engine::save_checkpoint(ckpt, engine, world); });
    bytes = file_size(ckpt);
    before_read(ckpt);
    s.cached_before_load.push_back(cached);
    clear_resident_state(engine);
    load = timed(world, "rchar", [&] { engine::load_checkpoint(ckpt, engine, world); });
    check_restored(world, engine, saved, ckpt);
    on_rank0(world, [&] { remove_file(ckpt); });
  };
  // The plain path moves as many bytes as the checkpoint has: the previous repeat's size
  // when it runs first (every repeat's checkpoint has the same size, checked by the caller).
  const auto plain_path = [&](int64_t size) {
    on_rank0(world, [&] { remove_file(plain); });
    write = timed(world, "wchar", [&] { plain_write(plain, size, rank, n, buf); });
    before_read(plain);
    s.cached_before_plain_read.push_back(cached);
    read = timed(world, "rchar", [&] { plain_read(plain, size, rank, n, buf); });
    check_plain_read(world, size, rank, n, buf, plain);
    on_rank0(world, [&] { remove_file(plain); });
  };
  if (repeat % 2 == 1 && previous_bytes > 0) {
    plain_path(previous_bytes);
    checkpoint_path();
  } else {
    checkpoint_path();
    plain_path(bytes);
  }

  for (auto [v, t] : {std::pair{&s.save, save}, {&s.load, load}, {&s.write, write}, {&s.read, read}})
    v->push_back(t.seconds);
  for (auto [v, t] : {std::pair{&s.save_io, save}, {&s.load_io, load}, {&s.write_io, write}, {&s.read_io, read}})
    v->push_back(t.syscall_bytes);
  return bytes;
}

std::vector<double> ratios(const std::vector<double>& num, const std::vector<double>& den) {
  std::vector<double> out;
  for (size_t i = 0; i < num.size(); ++i) out.push_back(num[i] / den[i]);
  return out;
}

nlohmann::json result_row(const engine::Engine& engine, int n, int threads, int64_t bytes, const CkptOptions& o,
                          const Samples& s, int64_t params) {
  const double save = app::median(s.save), load = app::median(s.load), write = app::median(s.write),
               read = app::median(s.read);
  const double b = double(bytes);
  return {{"ranks", n},
          {"stage", engine.config().zero.stage},
          {"threads_per_rank", threads},
          {"params", params},
          {"bytes", bytes},
          {"repeats", o.repeats},
          {"warmup", o.warmup},
          {"page_cache", o.cached ? "kept" : "dropped before every read"},
          {"save_s", s.save},
          {"load_s", s.load},
          {"plain_write_s", s.write},
          {"plain_read_s", s.read},
          {"save_s_median", save},
          {"load_s_median", load},
          {"plain_write_s_median", write},
          {"plain_read_s_median", read},
          {"save_gbps", b / save / GB},
          {"load_gbps", b / load / GB},
          {"plain_write_gbps", b / write / GB},
          {"plain_read_gbps", b / read / GB},
          {"save_vs_plain_write", write / save},
          {"load_vs_plain_read", read / load},
          // Each repeat's own ratio: the paths of one repeat ran back to back, in like conditions.
          {"save_vs_plain_write_per_repeat", ratios(s.write, s.save)},
          {"load_vs_plain_read_per_repeat", ratios(s.read, s.load)},
          {"save_syscall_write_bytes", app::median(s.save_io)},
          {"load_syscall_read_bytes", app::median(s.load_io)},
          {"plain_syscall_write_bytes", app::median(s.write_io)},
          {"plain_syscall_read_bytes", app::median(s.read_io)},
          {"cached_before_load", s.cached_before_load},
          {"cached_before_plain_read", s.cached_before_plain_read}};
}

// repeat 0: a warm-up round.
void print_progress(int n, int repeat, int repeats, int64_t bytes, const Samples& s) {
  const std::string round =
      repeat == 0 ? std::string("warm-up") : "repeat " + std::to_string(repeat) + "/" + std::to_string(repeats);
  std::printf("progress: ranks %d, %s (%.2f GB): save %.2f s, load %.2f s, plain write %.2f s, plain read %.2f s\n", n,
              round.c_str(), double(bytes) / GB, s.save.back(), s.load.back(), s.write.back(), s.read.back());
  std::fflush(stdout);
}

std::string options_key(const CkptOptions& o) {
  std::ostringstream s;
  s << o.model << '|' << o.dir << '|' << o.repeats << '|' << o.warmup << '|' << o.threads << '|' << o.cached;
  return s.str();
}

int run_worker(const CkptOptions& o) {
  TRIAD_CHECK(parallel::launched_by_mpirun(),
              "triad-bench ckpt --worker runs under mpirun; run `triad-bench ckpt` without --worker instead");
  int argc = 0;
  char** argv = nullptr;
  const parallel::CommunicatorPtr world = parallel::init(argc, argv);
  const int n = world->size(), rank = world->rank();
  const int threads = app::set_threads(parallel::threads_per_rank(o.threads));
  check_ranks_agree(*world, options_key(o), "ckpt");
  TRIAD_CHECK(std::filesystem::is_directory(o.dir),
              "triad-bench ckpt --worker: --dir '" << o.dir << "' is not a folder");

  const engine::TrainConfig config = make_config(o.model, n);
  engine::Engine engine(config, engine::process_grid(config, world));
  const int64_t params = engine.model().num_parameters();
  take_one_step(engine, rank);
  const std::vector<uint64_t> saved = resident_checksums(engine);
  if (rank == 0) {
    std::printf("progress: ranks %d: engine ready (%.1fM parameters, ZeRO stage %d, %d threads per rank)\n", n,
                double(params) / 1e6, engine.config().zero.stage, threads);
    std::fflush(stdout);
  }

  PlainBuffers buf(kChunkBytes);  // the plain path cycles through one chunk
  Samples warmup, s;
  int64_t bytes = 0;
  for (int r = 0; r < o.warmup + o.repeats; ++r) {
    const bool timed = r >= o.warmup;
    const int64_t b = run_repeat(*world, engine, o, saved, buf, timed ? s : warmup, r, bytes);
    TRIAD_CHECK(r == 0 || b == bytes, "triad-bench ckpt: the checkpoint was " << bytes << " bytes, then " << b);
    bytes = b;
    if (rank == 0) print_progress(n, timed ? r - o.warmup + 1 : 0, o.repeats, bytes, timed ? s : warmup);
  }
  if (rank == 0) app::print_json_line(result_row(engine, n, threads, bytes, o, s, params));
  return 0;
}

// ---------------------------------------------------------------------------------------
// Parent: launches the workers and reports.

// A fresh folder triad-bench-ckpt.XXXXXX inside `base`, removed with everything in it when
// this goes out of scope (errors included).
class WorkFolder {
 public:
  explicit WorkFolder(const std::string& base) {
    TRIAD_CHECK(std::filesystem::is_directory(base), "triad-bench ckpt: --dir '" << base << "' is not a folder");
    std::string name = (std::filesystem::path(base) / "triad-bench-ckpt.XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) fail_errno("creating a folder in", base, errno);
    path_ = name;
  }
  WorkFolder(const WorkFolder&) = delete;
  WorkFolder& operator=(const WorkFolder&) = delete;
  ~WorkFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) std::fprintf(stderr, "warning: could not remove '%s': %s\n", path_.c_str(), ec.message().c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

nlohmann::json run_one(const CkptOptions& o, const WorkerLauncher& launcher, int n, const std::string& folder) {
  std::vector<std::string> args = {"--model",   o.model,
                                   "--dir",     folder,
                                   "--repeats", std::to_string(o.repeats),
                                   "--warmup",  std::to_string(o.warmup),
                                   "--threads", std::to_string(o.threads)};
  if (o.cached) args.push_back("--cached");
  const auto progress = [](const std::string& line) {
    if (line.rfind("progress: ", 0) != 0) return;
    std::printf("  %s\n", line.c_str() + 10);
    std::fflush(stdout);
  };
  return launcher.run(n, args, "ranks " + std::to_string(n), "save_s_median", progress);
}

void print_header(const CkptOptions& o, const std::string& folder) {
  const nn::GPTConfig m = nn::GPTConfig::preset(o.model);
  const int cores = int(std::thread::hardware_concurrency());
  std::printf(
      "triad-bench ckpt: %s (L%lld C%lld V%lld), /model + /optim master, exp_avg, exp_avg_sq (f32); ranks %s, %d "
      "repeats after %d warm-up, %d cores%s\n",
      o.model.c_str(), (long long)m.n_layer, (long long)m.d_model, (long long)m.vocab_size, app::join(o.ranks).c_str(),
      o.repeats, o.warmup, cores,
      *std::max_element(o.ranks.begin(), o.ranks.end()) > cores ? " (ranks beyond the cores are oversubscribed)" : "");
  std::printf("writing in %s; page cache %s\n", folder.c_str(),
              o.cached ? "kept (reads may come from memory)" : "dropped before every read (both paths)");
  std::fflush(stdout);
}

void print_table(const nlohmann::json& rows) {
  std::printf(
      "medians of the slowest rank; GB = 1e9 bytes; plain = pwrite+fsync / pread of the same bytes, each rank its "
      "share of one file\n");
  std::printf("%5s %5s %7s %7s %7s %9s %9s %10s %9s %7s %7s\n", "ranks", "stage", "GB", "save s", "load s", "save GB/s",
              "load GB/s", "write GB/s", "read GB/s", "sv/wr", "ld/rd");
  for (const auto& r : rows)
    std::printf("%5d %5d %7.3f %7.2f %7.2f %9.3f %9.3f %10.3f %9.3f %7.2f %7.2f\n", r["ranks"].get<int>(),
                r["stage"].get<int>(), r["bytes"].get<double>() / GB, r["save_s_median"].get<double>(),
                r["load_s_median"].get<double>(), r["save_gbps"].get<double>(), r["load_gbps"].get<double>(),
                r["plain_write_gbps"].get<double>(), r["plain_read_gbps"].get<double>(),
                r["save_vs_plain_write"].get<double>(), r["load_vs_plain_read"].get<double>());
}

// One line per rank count: does each ratio reach the target?
double print_verdicts(const nlohmann::json& rows) {
  double worst = 1e300;
  for (const auto& r : rows) {
    const double sv = r["save_vs_plain_write"].get<double>(), ld = r["load_vs_plain_read"].get<double>();
    worst = std::min({worst, sv, ld});
    std::printf("ranks %d: save %.2fx plain write (%s), load %.2fx plain read (%s); target %.2fx\n",
                r["ranks"].get<int>(), sv, sv >= kTargetRatio ? "met" : "NOT met", ld,
                ld >= kTargetRatio ? "met" : "NOT met", kTargetRatio);
  }
  return worst;
}

int run_parent(const CkptOptions& o) {
  TRIAD_CHECK(!parallel::launched_by_mpirun(),
              "triad-bench ckpt starts its own workers under mpirun; run it without mpirun");
  TRIAD_CHECK(!o.ranks.empty(), "triad-bench ckpt: --ranks needs at least one value");
  for (int n : o.ranks) make_config(o.model, n);  // a bad preset fails before anything runs
  const WorkerLauncher launcher("ckpt");
  const WorkFolder folder(o.dir.empty() ? std::filesystem::temp_directory_path().string() : o.dir);
  print_header(o, folder.path());

  nlohmann::json rows = nlohmann::json::array();
  for (int n : o.ranks) rows.push_back(run_one(o, launcher, n, folder.path()));
  print_table(rows);
  const double worst = print_verdicts(rows);
  app::print_json_line({{"bench", "ckpt"},
                        {"model", o.model},
                        {"params", rows[0]["params"]},
                        {"cores", int(std::thread::hardware_concurrency())},
                        {"ranks", o.ranks},
                        {"repeats", o.repeats},
                        {"warmup", o.warmup},
                        {"page_cache", o.cached ? "kept" : "dropped before every read"},
                        {"target_ratio", kTargetRatio},
                        {"rows", rows},
                        {"worst_ratio", worst},
                        {"target_met", worst >= kTargetRatio}});
  return 0;
}

}  // namespace

int run_ckpt_bench(const CkptOptions& o) { return o.worker ? run_worker(o) : run_parent(o); }

}  // namespace triad::bench
