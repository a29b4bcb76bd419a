// An emulation, on the CPU, of the CUDA pieces the backend's emulated kernels use (the
// tensor-core attention, the index, quantization, quantized linear, sampling and MoE routing
// kernels), so that their code compiles with the host compiler and runs here (include this
// first, then the kernels' header). A block runs as blockDim.x fibers (ucontext) on the
// calling thread, switched at the barriers, so a barrier costs two context switches per
// thread and no system's thread:
// - threadIdx, blockIdx, blockDim and gridDim are set for the fiber that runs;
// - __syncthreads and __syncwarp are barriers over the block and over a warp's 32 threads;
//   a barrier that some threads never reach (divergent code) aborts with a message instead
//   of hanging; __shfl_xor_sync exchanges through a per-warp array between two warp barriers;
// - `static __shared__` variables are static variables: one per program, as blocks run
//   one at a time;
// - atomicAdd on floats and atomicCAS are plain read-modify-writes (fibers switch only at
//   barriers), atomic_add_pair too; __threadfence_system is nothing; __dp4a sums its four
//   byte products;
// - mma.sync, ldmatrix and cp.async (cuda/backend/mma_sync.cuh) are warp-collective with
//   the PTX ISA's fragment layouts; cp.async copies at once; an ldmatrix row, a cp.async
//   operand or a float2 atomic off its alignment aborts with a message;
// - dynamic shared memory is one buffer, filled with NaN bytes before every block, so a
//   read before a write shows.
// What it cannot show: the hardware's own layouts where they differ from the documented
// ones, alignment rules beyond those above, races (threads run one at a time, each until its next barrier),
// and speed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include "tensor/float16.h"

namespace triad::emulation {

struct Index {
  unsigned x = 0, y = 0, z = 0;
};
inline Index thread_idx, block_idx, block_dim, grid_dim;

// Hands the running fiber's turn to the next one (the scheduler in launch()).
void yield();

// A barrier over `count` fibers: the last to arrive opens it, the others yield until then.
struct Barrier {
  unsigned count = 0, arrived = 0;
  uint64_t generation = 0;
  void arrive_and_wait() {
    const uint64_t g = generation;
    if (++arrived == count) {
      arrived = 0;
      ++generation;
      return;
    }
    while (generation == g) yield();
  }
};

constexpr int kMaxWarps = 32;
inline Barrier block_barrier;
inline Barrier warp_barrier[kMaxWarps];
inline uint64_t shuffle_slot[kMaxWarps][32];  // any value of up to 8 bytes

// Runs f() as the blocks of a (grid_x, grid_y) grid of `threads` threads each (a multiple
// of 32, at most 1024), a block at a time. File-local (static), as the shared memory it
// fills is: several files of one program each have their own.
static void launch(unsigned grid_x, unsigned grid_y, unsigned threads, const std::function<void()>& f);

}  // namespace triad::emulation

#define __launch_bounds__(...)
#define threadIdx ::triad::emulation::thread_idx
#define blockIdx ::triad::emulation::block_idx
#define blockDim ::triad::emulation::block_dim
#define gridDim ::triad::emulation::grid_dim

inline void __syncthreads() { triad::emulation::block_barrier.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { triad::emulation::warp_barrier[threadIdx.x / 32].arrive_and_wait(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= sizeof(triad::emulation::shuffle_slot[0][0]));
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncwarp();
  std::memcpy(&triad::emulation::shuffle_slot[warp][lane], &v, sizeof v);
  __syncwarp();
  T r;
  std::memcpy(&r, &triad::emulation::shuffle_slot[warp][lane ^ unsigned(mask)], sizeof r);
  __syncwarp();
  return r;
}
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicCAS(unsigned* p, unsigned expected, unsigned desired) {
  const unsigned old = *p;
  if (old == expected) *p = desired;
  return old;
}
inline void __threadfence_system() {}
// c + the sum of the products of a's and b's four signed bytes.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += int(int8_t(unsigned(a) >> (8 * i))) * int(int8_t(unsigned(b) >> (8 * i)));
  return c;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline long long __double_as_longlong(double d) {
  long long u;
  std::memcpy(&u, &d, 8);
  return u;
}

namespace triad::emulation {
inline uint32_t fragment_slot[kMaxWarps][32][6];   // a lane's registers for an mma
inline const void* address_slot[kMaxWarps][32];  // a lane's row address for ldmatrix
inline float element(uint32_t pair, int i, bool bf16) {  // element i (0: low half) of a pair
  const uint16_t h = uint16_t(pair >> (16 * i));
  return bf16 ? bf16_to_float(h) : f16_to_float(h);
}
}  // namespace triad::emulation

// mma.sync, ldmatrix and cp.async (cuda/backend/mma_sync.cuh), warp-collective as the PTX
// ISA documents them: each lane deposits its registers or its row address, and after a
// warp barrier takes its own part of the result in the documented fragment layout. The
// products are exact in f32 and summed in order of k; the hardware's order may differ.
namespace triad::cuda {

namespace emulation_detail {

// Deposits this lane's registers in its warp's slots; after the warp barrier, every lane's.
inline const uint32_t (*warp_registers(std::initializer_list<uint32_t> regs))[6] {
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncwarp();
  std::copy(regs.begin(), regs.end(), triad::emulation::fragment_slot[warp][lane]);
  __syncwarp();
  return triad::emulation::fragment_slot[warp];
}

// d, this lane's C fragment, += A B (the warp's 16 x 16 A and 16 x 8 B), summed in order of
// k; then the warp barrier after which the slots may be written again.
template <class T>
void add_product(T (&d)[4], const T (&A)[16][16], const T (&B)[16][8]) {
  const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 32) % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    T s = d[i];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    d[i] = s;
  }
  __syncwarp();
}

}  // namespace emulation_detail

template <class W>
void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using triad::emulation::element;
  constexpr bool bf16 = std::is_same_v<W, __nv_bfloat16>;
  const uint32_t(*regs)[6] = emulation_detail::warp_registers({a[0], a[1], a[2], a[3], b0, b1});
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    const uint32_t* r = regs[l];
    for (int j = 0; j < 2; ++j) {
      A[g][2 * t + j] = element(r[0], j, bf16);
      A[g + 8][2 * t + j] = element(r[1], j, bf16);
      A[g][2 * t + 8 + j] = element(r[2], j, bf16);
      A[g + 8][2 * t + 8 + j] = element(r[3], j, bf16);
      B[2 * t + j][g] = element(r[4], j, bf16);
      B[2 * t + 8 + j][g] = element(r[5], j, bf16);
    }
  }
  emulation_detail::add_product(d, A, B);
}

inline void mma_s8_16816(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  const uint32_t(*regs)[6] = emulation_detail::warp_registers({a0, a1, b});
  int A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    const uint32_t* r = regs[l];
    for (int i = 0; i < 4; ++i) {
      A[g][4 * t + i] = int8_t(r[0] >> (8 * i));
      A[g + 8][4 * t + i] = int8_t(r[1] >> (8 * i));
      B[4 * t + i][g] = int8_t(r[2] >> (8 * i));
    }
  }
  emulation_detail::add_product(d, A, B);
}

// Aborts, naming `what`, where p is not aligned to `bytes` (the hardware faults there).
inline void require_aligned(const void* p, size_t bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  std::fprintf(stderr, "emulation: %s at %p is not aligned to %zu bytes\n", what, p, bytes);
  std::abort();
}

inline void ldmatrix_x4_impl(uint32_t (&r)[4], const void* row, bool trans) {
  using namespace triad::emulation;
  require_aligned(row, 16, "an ldmatrix row");
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncwarp();
  address_slot[warp][lane] = row;
  __syncwarp();
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    uint16_t e[2];
    for (unsigned j = 0; j < 2; ++j)
      e[j] = trans ? static_cast<const uint16_t*>(address_slot[warp][8 * i + 2 * t + j])[g]
                   : static_cast<const uint16_t*>(address_slot[warp][8 * i + g])[2 * t + j];
    r[i] = uint32_t(e[0]) | uint32_t(e[1]) << 16;
  }
  __syncwarp();
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4_impl(r, row, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix_x4_impl(r, row, true); }

inline void atomic_add_pair(float* p, float a, float b) {
  require_aligned(p, 8, "a float2 atomic");
  p[0] += a, p[1] += b;
}
inline void cp_async_16(void* shared, const void* global) {
  require_aligned(shared, 16, "a cp.async destination");
  require_aligned(global, 16, "a cp.async source");
  std::memcpy(shared, global, 16);
}
inline void cp_async_commit() {}
inline void cp_async_wait_all() {}

}  // namespace triad::cuda

// The kernels' `extern __shared__` array: one buffer, big enough for any block, in each file
// (the kernels, in an anonymous namespace, declare it there).
namespace triad::cuda {
namespace {
alignas(128) unsigned char smem[232448];
}  // namespace
}  // namespace triad::cuda

namespace triad::emulation {

namespace fibers {

constexpr size_t kStackBytes = 256 * 1024;  // the kernels' locals: register tiles of a few KiB

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  bool finished = false;
};

inline ucontext_t scheduler;
inline std::vector<Fiber> block;
inline unsigned running = 0;
inline const std::function<void()>* body = nullptr;

inline void run_body() {
  (*body)();
  block[running].finished = true;
}  // returns to the scheduler (uc_link)

}  // namespace fibers

inline void yield() {
  if (swapcontext(&fibers::block[fibers::running].context, &fibers::scheduler) != 0) std::abort();
}

static inline void launch(unsigned grid_x, unsigned grid_y, unsigned threads, const std::function<void()>& f) {
  using namespace fibers;
  grid_dim = {grid_x, grid_y, 1};
  block_dim = {threads, 1, 1};
  body = &f;
  block.resize(threads);
  for (Fiber& fiber : block)
    if (!fiber.stack) fiber.stack = std::make_unique_for_overwrite<char[]>(kStackBytes);
  for (unsigned y = 0; y < grid_y; ++y)
    for (unsigned x = 0; x < grid_x; ++x) {
      std::memset(cuda::smem, 0xff, sizeof cuda::smem);
      block_idx = {x, y, 0};
      block_barrier = Barrier{threads};
      for (unsigned w = 0; w < threads / 32; ++w) warp_barrier[w] = Barrier{32};
      for (Fiber& fiber : block) {
        fiber.finished = false;
        if (getcontext(&fiber.context) != 0) std::abort();
        fiber.context.uc_stack = {fiber.stack.get(), 0, kStackBytes};
        fiber.context.uc_link = &scheduler;
        makecontext(&fiber.context, run_body, 0);
      }
      // Round robin until every thread has returned. A round in which no thread finished
      // and no barrier opened means the threads wait on a barrier that the rest never reach.
      for (unsigned left = threads; left > 0;) {
        const uint64_t opened = block_barrier.generation;
        uint64_t warp_opened = 0;
        for (unsigned w = 0; w < threads / 32; ++w) warp_opened += warp_barrier[w].generation;
        const unsigned before = left;
        for (running = 0; running < threads; ++running) {
          if (block[running].finished) continue;
          thread_idx = {running, 0, 0};
          if (swapcontext(&scheduler, &block[running].context) != 0) std::abort();
          left -= block[running].finished;
        }
        uint64_t warp_now = 0;
        for (unsigned w = 0; w < threads / 32; ++w) warp_now += warp_barrier[w].generation;
        if (left == before && opened == block_barrier.generation && warp_opened == warp_now) {
          std::fprintf(stderr, "emulation: block (%u, %u) is stuck: %u threads wait on a barrier the others never reach\n",
                       x, y, left);
          std::abort();
        }
      }
    }
}

}  // namespace triad::emulation
