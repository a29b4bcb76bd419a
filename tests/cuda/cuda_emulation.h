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
//   barriers); __threadfence_system is nothing; __dp4a sums its four byte products;
// - the WMMA calls (nvcuda::wmma) are warp-collective as documented: every lane of a warp
//   passes the same arguments; each lane holds the whole 16 x 16 tile, loads it with the
//   documented row- or column-major addressing, and lane 0 stores it;
// - dynamic shared memory is one buffer, filled with NaN bytes before every block, so a
//   read before a write shows.
// What it cannot show: the hardware's fragment layouts and alignment rules, races (threads
// run one at a time, each until its next barrier), and speed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

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

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float v[16][16];
};
using Acc = fragment<accumulator, 16, 16, 16, float>;

inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float to_float(__half x) { return __half2float(x); }

template <class F>
void fill_fragment(F& f, float x) {
  for (auto& row : f.v)
    for (float& e : row) e = x;
}

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ld) {
  __syncwarp();
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j)
      f.v[i][j] = to_float(std::is_same_v<Layout, row_major> ? p[i * ld + j] : p[i + j * ld]);
  __syncwarp();
}

inline void load_matrix_sync(Acc& f, const float* p, unsigned ld, layout_t layout) {
  __syncwarp();
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) f.v[i][j] = layout == mem_row_major ? p[i * ld + j] : p[i + j * ld];
  __syncwarp();
}

inline void store_matrix_sync(float* p, const Acc& f, unsigned ld, layout_t layout) {
  __syncwarp();
  if (threadIdx.x % 32 == 0)
    for (unsigned i = 0; i < 16; ++i)
      for (unsigned j = 0; j < 16; ++j) (layout == mem_row_major ? p[i * ld + j] : p[i + j * ld]) = f.v[i][j];
  __syncwarp();
}

// d = a b + c, in f32 (d may be c).
template <class TA, class LA, class TB, class LB>
void mma_sync(Acc& d, const fragment<matrix_a, 16, 16, 16, TA, LA>& a, const fragment<matrix_b, 16, 16, 16, TB, LB>& b,
              const Acc& c) {
  float r[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float s = c.v[i][j];
      for (int k = 0; k < 16; ++k) s += a.v[i][k] * b.v[k][j];
      r[i][j] = s;
    }
  std::memcpy(d.v, r, sizeof r);
}

}  // namespace nvcuda::wmma

// The kernels' `extern __shared__` array: one buffer, big enough for any block, in each file
// (the kernels, in an anonymous namespace, declare it there).
namespace triad::cuda {
namespace {
alignas(128) unsigned char smem[232448];
}  // namespace
}  // namespace triad::cuda

namespace triad::emulation {

namespace fibers {

constexpr size_t kStackBytes = 256 * 1024;  // the kernels' locals: a few WMMA tiles at most

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
