#include "io/swap_file.h"

#include <fcntl.h>
#include <libaio.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tensor/error.h"

namespace triad::io {

namespace {

std::once_flag buffered_note, threads_note;
// io_setup answered EPERM or ENOSYS once: kernel aio is off for the whole process.
std::atomic<bool> kernel_aio_refused{false};

void note_once(std::once_flag& flag, const std::string& what) {
  std::call_once(flag, [&] { std::fprintf(stderr, "note: %s\n", what.c_str()); });
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] void fail(const std::string& path, bool write, int64_t offset, int64_t bytes, const std::string& why) {
  throw Error("swap file '" + path + "': " + (write ? "write" : "read") + " of " + std::to_string(bytes) +
              " bytes at offset " + std::to_string(offset) + " failed: " + why);
}

std::string short_transfer(bool write, int64_t done, int64_t wanted) {
  return std::string("short ") + (write ? "write" : "read") + " (" + std::to_string(done) + " of " +
         std::to_string(wanted) + " bytes" + (write ? ")" : "; the file is shorter than it was written)");
}

// One thread's part of a transfer through pread/pwrite, block_size bytes a call.
void pio_transfer(int fd, const std::string& path, bool write, int64_t offset, char* data, int64_t bytes,
                  int64_t block) {
  for (int64_t done = 0; done < bytes;) {
    const size_t n = size_t(std::min(block, bytes - done));
    const ssize_t rc = write ? ::pwrite(fd, data + done, n, offset + done) : ::pread(fd, data + done, n, offset + done);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) fail(path, write, offset + done, int64_t(n), std::strerror(errno));
    if (rc == 0) fail(path, write, offset + done, int64_t(n), short_transfer(write, 0, int64_t(n)));
    done += rc;
  }
}

// One thread's part of a transfer through kernel aio context `ctx` (of queue_depth
// entries): block_size requests, at most queue_depth in flight. Returns with none in flight.
void aio_transfer(io_context_t ctx, int fd, const std::string& path, bool write, int64_t offset, char* data,
                  int64_t bytes, const AioConfig& c) {
  const int depth = int(std::min(c.queue_depth, ceil_div(bytes, c.block_size)));
  std::vector<iocb> cbs(static_cast<size_t>(depth));
  std::vector<iocb*> idle;
  for (iocb& cb : cbs) idle.push_back(&cb);
  std::vector<io_event> events(static_cast<size_t>(depth));
  int64_t next = 0;  // the first byte not yet requested
  int in_flight = 0;
  while (next < bytes || in_flight > 0) {
    if (next < bytes && (c.overlap_events || in_flight == 0)) {
      std::vector<iocb*> ready;
      for (; !idle.empty() && next < bytes; idle.pop_back()) {
        const int64_t n = std::min(c.block_size, bytes - next);
        if (write)
          io_prep_pwrite(idle.back(), fd, data + next, size_t(n), offset + next);
        else
          io_prep_pread(idle.back(), fd, data + next, size_t(n), offset + next);
        ready.push_back(idle.back());
        next += n;
      }
      for (size_t done = 0; done < ready.size();) {
        const long count = c.single_submit ? 1 : long(ready.size() - done);
        const int submitted = io_submit(ctx, count, ready.data() + done);
        if (submitted <= 0)
          fail(path, write, ready[done]->u.c.offset, int64_t(ready[done]->u.c.nbytes),
               std::string("io_submit: ") + std::strerror(submitted < 0 ? -submitted : EAGAIN));
        done += size_t(submitted);
        in_flight += submitted;
      }
    }
    int got;
    do got = io_getevents(ctx, c.overlap_events ? 1 : in_flight, depth, events.data(), nullptr);
    while (got == -EINTR);
    if (got < 0) fail(path, write, offset, bytes, std::string("io_getevents: ") + std::strerror(-got));
    for (int i = 0; i < got; ++i) {
      iocb* cb = events[size_t(i)].obj;
      const long res = long(events[size_t(i)].res);
      const int64_t wanted = int64_t(cb->u.c.nbytes);
      if (res < 0) fail(path, write, cb->u.c.offset, wanted, std::strerror(int(-res)));
      if (res != wanted) fail(path, write, cb->u.c.offset, wanted, short_transfer(write, res, wanted));
      idle.push_back(cb);
      --in_flight;
    }
  }
}

}  // namespace

// Kernel aio contexts, kept for the file's life: creating and destroying one costs tens of
// milliseconds (io_destroy waits for an RCU grace period), more than a transfer. Each
// thread of a transfer leases one; transfers running at once (a read ahead beside a write
// back) lease several.
class SwapFile::AioContexts {
 public:
  explicit AioContexts(int64_t depth) : depth_(int(depth)) {}
  ~AioContexts() {
    for (io_context_t ctx : idle_) io_destroy(ctx);
  }
  // A context, or null when the kernel gives none (the caller falls back to pread/pwrite).
  io_context_t lease(const std::string& path) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        io_context_t ctx = idle_.back();
        idle_.pop_back();
        return ctx;
      }
    }
    io_context_t ctx = nullptr;
    const int rc = io_setup(depth_, &ctx);
    if (rc == -EPERM || rc == -ENOSYS || rc == -EAGAIN) {
      if (rc != -EAGAIN) kernel_aio_refused = true;
      note_once(threads_note, std::string("io_setup: ") + std::strerror(-rc) +
                                  "; swap files are read and written with pread/pwrite on threads");
      return nullptr;
    }
    TRIAD_CHECK(rc == 0, "swap file '" << path << "': io_setup failed: " << std::strerror(-rc));
    return ctx;
  }
  // Back after a transfer that completed; one that failed may still have requests in
  // flight, which io_destroy waits for before the caller frees their buffer.
  void give_back(io_context_t ctx, bool clean) {
    if (!clean) {
      io_destroy(ctx);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(ctx);
  }

 private:
  int depth_;
  std::mutex mutex_;
  std::vector<io_context_t> idle_;
};

void check_aio(const AioConfig& c) {
  TRIAD_CHECK(c.block_size > 0 && c.block_size % kSwapAlignment == 0,
              "[config] aio.block_size must be a positive multiple of " << kSwapAlignment
                                                                        << " bytes (direct I/O moves whole pages), got "
                                                                        << c.block_size);
  TRIAD_CHECK(c.queue_depth >= 1, "[config] aio.queue_depth must be at least 1, got " << c.queue_depth);
  TRIAD_CHECK(c.intra_op_parallelism >= 1,
              "[config] aio.intra_op_parallelism must be at least 1, got " << c.intra_op_parallelism);
}

AlignedBuffer aligned_buffer(int64_t bytes) {
  void* p = nullptr;
  const int rc = posix_memalign(&p, size_t(kSwapAlignment), size_t(std::max<int64_t>(align_up(bytes), kSwapAlignment)));
  TRIAD_CHECK(rc == 0, "out of host memory allocating " << bytes << " bytes for swapping: " << std::strerror(rc));
  return AlignedBuffer(p);
}

SwapFile::SwapFile(std::string path, int64_t bytes, const AioConfig& config, Paths paths)
    : path_(std::move(path)), config_(config), kernel_aio_(paths.kernel_aio) {
  TRIAD_ASSERT(bytes >= 0 && bytes % kSwapAlignment == 0);
  check_aio(config);
  contexts_ = std::make_unique<AioContexts>(config.queue_depth);
  // No O_TRUNC here: the file may be another live process's, which the lock finds out
  // before anything of it is changed.
  const int flags = O_RDWR | O_CREAT | O_CLOEXEC;
  fd_ = ::open(path_.c_str(), flags | (paths.direct ? O_DIRECT : 0), 0600);
  if (fd_ < 0 && paths.direct && errno == EINVAL) {
    note_once(buffered_note, "'" + path_ + "': the file system refuses O_DIRECT; swap files are read and written "
                                           "through the page cache");
    fd_ = ::open(path_.c_str(), flags, 0600);
  }
  TRIAD_CHECK(fd_ >= 0, "cannot create swap file '" << path_ << "': " << std::strerror(errno));
  const auto give_up = [&](const std::string& why) {
    ::close(fd_);
    fd_ = -1;
    throw Error("swap file '" + path_ + "': " + why);
  };
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
    give_up(errno == EWOULDBLOCK ? "another process is using it (it is locked)"
                                 : std::string("cannot lock it: ") + std::strerror(errno));
  // A file left by an earlier run is not trusted: its contents go.
  if (::ftruncate(fd_, 0) != 0) give_up(std::string("cannot truncate it: ") + std::strerror(errno));
  try {
    grow(bytes);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
    throw;
  }
}

SwapFile::~SwapFile() {
  if (fd_ < 0) return;
  if (::close(fd_) != 0)
    std::fprintf(stderr, "warning: closing swap file '%s': %s\n", path_.c_str(), std::strerror(errno));
  if (::unlink(path_.c_str()) != 0)
    std::fprintf(stderr, "warning: cannot remove swap file '%s': %s\n", path_.c_str(), std::strerror(errno));
}

void SwapFile::grow(int64_t bytes) {
  TRIAD_ASSERT(bytes >= size_ && bytes % kSwapAlignment == 0);
  if (bytes == size_) return;
  const int rc = ::posix_fallocate(fd_, size_, bytes - size_);
  TRIAD_CHECK(rc == 0, "swap file '" << path_ << "': cannot allocate " << bytes << " bytes: " << std::strerror(rc));
  size_ = bytes;
}

void SwapFile::write(int64_t offset, const void* data, int64_t bytes) const {
  transfer(true, offset, static_cast<char*>(const_cast<void*>(data)), bytes);
}

void SwapFile::read(int64_t offset, void* data, int64_t bytes) const { transfer(false, offset, static_cast<char*>(data), bytes); }

void SwapFile::transfer(bool write, int64_t offset, char* data, int64_t bytes) const {
  TRIAD_ASSERT_MSG(offset >= 0 && bytes >= 0 && offset + bytes <= size_ && offset % kSwapAlignment == 0 &&
                       bytes % kSwapAlignment == 0 && reinterpret_cast<uintptr_t>(data) % kSwapAlignment == 0,
                   path_ << ": transfer of " << bytes << " bytes at " << offset << " of " << size_);
  // Thread t takes blocks [blocks t / threads, blocks (t + 1) / threads).
  const int64_t blocks = ceil_div(bytes, config_.block_size);
  const int64_t threads = std::min(config_.intra_op_parallelism, blocks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  const auto part = [&](int64_t t) {
    const int64_t begin = blocks * t / threads * config_.block_size;
    const int64_t end = std::min(bytes, blocks * (t + 1) / threads * config_.block_size);
    try {
      io_context_t ctx = kernel_aio_ && !kernel_aio_refused ? contexts_->lease(path_) : nullptr;
      if (!ctx) return pio_transfer(fd_, path_, write, offset + begin, data + begin, end - begin, config_.block_size);
      bool clean = false;
      try {
        aio_transfer(ctx, fd_, path_, write, offset + begin, data + begin, end - begin, config_);
        clean = true;
      } catch (...) {
        contexts_->give_back(ctx, clean);
        throw;
      }
      contexts_->give_back(ctx, clean);
    } catch (...) {
      errors[size_t(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> others;
  for (int64_t t = 1; t < threads; ++t) others.emplace_back(part, t);
  if (threads > 0) part(0);
  for (std::thread& t : others) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace triad::io
