// The CUDA backend's Mixture-of-Experts routing (tensor/expert_routing.h, Note [MoE routing]
// in nn/moe_routing.h), equal to the CPU backend's (tensor/cpu/moe_route.cpp) choice for
// choice:
// - moe_choose_kernel: a thread per token picks its experts with the host's own moe_choose
//   (the same draws: tensor/random.h);
// - moe_place_kernel: a block per expert counts its choices (load, first_load) and gives
//   them slots by a block-wide prefix sum over the choices in DeepSpeed's order (tokens in
//   order; for k = 2 all first choices, then all second choices). Over capacity with a
//   priority (random token selection at k = 1, the probabilities at k >= 3) the block first
//   finds the capacity-th largest priority bit by bit (a radix select over the f64 bit
//   patterns, which order as the values do for values >= 0), keeps the choices above it and
//   the earliest of those equal to it, then numbers the kept ones in token order; the CPU's
//   stable sort keeps the same ones;
// - moe_indices_kernel: a thread per choice writes its gather indices (ops::moe_indices,
//   ops::moe_indices_dropless).
// Integers only after the choice, so no rounding order can tell the two backends apart.
// The kernels live in a header of their own so that tests/cuda/test_moe_route_emulated.cpp
// runs them on the CPU under an emulation of CUDA.
#pragma once

#include <cstdint>

#include "cuda/backend/launch.cuh"
#include "tensor/expert_routing.h"

namespace triad::cuda {

constexpr int kMoEThreads = 256;  // the most threads of a moe_place_kernel block

namespace {

// The exclusive prefix sum of v over the block's threads in order; *total gets the sum.
// blockDim.x <= kMoEThreads.
__device__ inline int moe_block_scan(int v, int* total) {
  static __shared__ int s_scan[kMoEThreads];
  const int t = threadIdx.x, n = blockDim.x;
  __syncthreads();  // a previous call's readers are done with s_scan
  s_scan[t] = v;
  __syncthreads();
  for (int offset = 1; offset < n; offset <<= 1) {
    const int x = t >= offset ? s_scan[t - offset] : 0;
    __syncthreads();
    s_scan[t] += x;
    __syncthreads();
  }
  *total = s_scan[n - 1];
  return s_scan[t] - v;
}

// The choice at position i of DeepSpeed's order: token order, and for k = 2 every first
// choice before every second one.
__device__ inline int64_t moe_choice_at(int64_t i, int64_t S, int64_t K) {
  return K == 2 ? (i < S ? 2 * i : 2 * (i - S) + 1) : i;
}

// Choice c's priority for expert e as bits that order as the (non-negative) values do.
__device__ inline uint64_t moe_priority_key(const RouteValues& priority, int64_t c, int64_t K, int64_t E, int64_t e) {
  return uint64_t(__double_as_longlong(priority.at((c / K) * E + e)));
}

__global__ void __launch_bounds__(kThreads) moe_choose_kernel(RouteValues probs, RouteValues logits,
                                                              RouteValues noise, int64_t S, int64_t E, int64_t K,
                                                              int64_t* expert) {
  for (int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < S; s += int64_t(gridDim.x) * blockDim.x)
    moe_choose(probs, logits, noise, s, E, K, expert + s * K);
}

// Block e: load[e], first_load[e] and the locations of expert e's choices (-1 dropped).
// capacity -1: dropless. priority: absent where the first choices keep their places.
__global__ void __launch_bounds__(kMoEThreads)
    moe_place_kernel(const int64_t* expert, int64_t S, int64_t E, int64_t K, int64_t capacity, RouteValues priority,
                     int64_t* location, int64_t* load, int64_t* first_load) {
  const int64_t e = blockIdx.x, n = S * K;
  int64_t routed = 0, firsts = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    if (expert[c] == e) ++routed, firsts += c % K == 0;
  const int64_t count = block_reduce(routed, SumOp{}, int64_t(0));
  const int64_t first = block_reduce(firsts, SumOp{}, int64_t(0));
  if (threadIdx.x == 0) load[e] = count, first_load[e] = first;

  const bool select = capacity >= 0 && count > capacity && priority.present();  // the same in every thread
  uint64_t threshold = 0;  // the capacity-th largest key: the largest t with capacity keys >= t
  int64_t ties_kept = 0;   // how many keys equal to threshold are kept, the earliest
  if (select) {
    for (int bit = 63; bit >= 0; --bit) {
      const uint64_t candidate = threshold | (uint64_t(1) << bit);
      int64_t above = 0;
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
        above += expert[c] == e && moe_priority_key(priority, c, K, E, e) >= candidate;
      if (block_reduce(above, SumOp{}, int64_t(0)) >= capacity) threshold = candidate;
    }
    int64_t above = 0;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
      above += expert[c] == e && moe_priority_key(priority, c, K, E, e) > threshold;
    ties_kept = capacity - block_reduce(above, SumOp{}, int64_t(0));
  }

  int64_t kept_before = 0, ties_before = 0;
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x, c = i < n ? moe_choice_at(i, S, K) : -1;
    const bool mine = c >= 0 && expert[c] == e;
    bool keep = mine;
    if (select) {
      const uint64_t key = mine ? moe_priority_key(priority, c, K, E, e) : 0;
      const bool tie = mine && key == threshold;
      int ties = 0;
      const int64_t tie_rank = ties_before + moe_block_scan(tie, &ties);
      ties_before += ties;
      keep = mine && (key > threshold || (tie && tie_rank < ties_kept));
    }
    int kept = 0;
    const int64_t rank = kept_before + moe_block_scan(keep, &kept);
    kept_before += kept;
    if (mine) location[c] = keep && (capacity < 0 || rank < capacity) ? rank : -1;
  }
}

// ops::moe_indices, and with load ops::moe_indices_dropless (expert e's rows after the
// load of the experts before it, summed by each thread: E is small); source (rows
// entries) already holds S (empty) everywhere.
__global__ void __launch_bounds__(kThreads)
    moe_indices_kernel(const int64_t* expert, const int64_t* location, int64_t S, int64_t K, int64_t E, int64_t C,
                       const int64_t* load, int64_t rows, int64_t* choice, int64_t* slot, int64_t* source) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < S * K; c += int64_t(gridDim.x) * blockDim.x) {
    const bool kept = location[c] >= 0;
    int64_t start = 0;
    if (kept && load)
      for (int64_t e = 0; e < expert[c]; ++e) start += load[e];
    else if (kept)
      start = expert[c] * C;
    choice[c] = kept ? (c / K) * E + expert[c] : S * E;
    slot[c] = kept ? start + location[c] : rows;
    if (kept) source[slot[c]] = c / K;
  }
}

}  // namespace

}  // namespace triad::cuda
