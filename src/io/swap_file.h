// SwapFile: a scratch file of fixed size that buffers are swapped out to and back in, whole,
// with direct I/O (O_DIRECT: past the page cache, which would only hold a second copy)
// through Linux's asynchronous I/O (libaio), as DeepSpeed's DeepNVMe does for ZeRO-Infinity.
// Each transfer is cut into block_size requests, queue_depth of them in flight, over
// intra_op_parallelism threads that each take a contiguous part of it (the knobs of
// DeepSpeed's `aio` section, AioConfig).
//
// Contracts:
// - The file is created by the constructor with its full size allocated (posix_fallocate:
//   a full disk fails there, not in the middle of a run), replacing a file of that name
//   that no live process holds; it is locked (flock) while open, so a second process
//   naming the same file fails instead of overwriting it; the destructor removes it.
// - Buffers are aligned to kSwapAlignment (aligned_buffer gives such memory); offsets and
//   sizes are multiples of it (align_up).
// - Every failure throws triad::Error naming the file, the operation, its offset and size,
//   and the system's reason: open, fallocate, io_setup, io_submit, a failed or short
//   transfer (a file shorter than expected), ENOSPC.
// - Two fallbacks, each announced once per process on stderr: a file system that refuses
//   O_DIRECT (EINVAL at open) is read and written through the page cache; where io_setup is
//   not permitted (containers: EPERM, ENOSYS) or the system's aio request limit is reached
//   (EAGAIN), transfers use pread/pwrite on the same threads. Paths chooses what to try
//   first (tests take each fallback path on purpose).
// - read and write may run on several threads at once for disjoint ranges of the file.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

namespace triad::io {

// DeepSpeed's `aio` section (use_gds is the config's: triad has no GPUDirect Storage).
struct AioConfig {
  int64_t block_size = 1048576;      // bytes per request
  int64_t queue_depth = 8;           // requests in flight per thread
  int64_t intra_op_parallelism = 1;  // threads per transfer (DeepSpeed's thread_count)
  bool single_submit = false;        // one request per io_submit call, else every ready one at once
  bool overlap_events = true;        // submit a request as soon as one completes, else after the whole batch
};

inline constexpr int64_t kSwapAlignment = 4096;  // a page: every device's logical block size or a multiple of it
inline int64_t align_up(int64_t bytes) { return (bytes + kSwapAlignment - 1) / kSwapAlignment * kSwapAlignment; }

// Error naming the aio key out of range: block_size must be a positive multiple of
// kSwapAlignment (direct I/O moves whole pages), the counts positive.
void check_aio(const AioConfig& config);

struct FreeMemory {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<void, FreeMemory>;
// `bytes` (rounded up to the alignment) of host memory aligned to kSwapAlignment; Error
// when the host has none left.
AlignedBuffer aligned_buffer(int64_t bytes);

class SwapFile {
 public:
  struct Paths {
    bool direct = true;      // open with O_DIRECT (else through the page cache)
    bool kernel_aio = true;  // libaio (else pread/pwrite on threads)
  };
  // Creates `path` of `bytes` (a multiple of kSwapAlignment). Error naming the path when
  // its folder is missing or not writable, the disk is full or another process holds it.
  SwapFile(std::string path, int64_t bytes, const AioConfig& config, Paths paths);
  SwapFile(std::string path, int64_t bytes, const AioConfig& config) : SwapFile(std::move(path), bytes, config, {}) {}
  ~SwapFile();  // after every transfer has returned
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  // Grows the file to `bytes` (allocated), keeping its contents.
  void grow(int64_t bytes);

  // Whole transfers of [offset, offset + bytes), returning when done.
  void write(int64_t offset, const void* data, int64_t bytes) const;
  void read(int64_t offset, void* data, int64_t bytes) const;

 private:
  void transfer(bool write, int64_t offset, char* data, int64_t bytes) const;

  class AioContexts;  // swap_file.cpp: kernel aio contexts, reused

  std::string path_;
  std::unique_ptr<AioContexts> contexts_;
  int fd_ = -1;
  int64_t size_ = 0;
  AioConfig config_;
  bool kernel_aio_;
};

}  // namespace triad::io
