// The CUDA backend's kernels of Note [Positions on the device] (tensor/ops.h): a copy into a
// destination at a position read from device memory (ops::copy_at_) and the increment of
// such counters (ops::increment_). Their launches stay the same from one decode step to
// the next, so a recorded step replays them (Note [Decode graphs], engine/generate.h). The
// kernels live in a header of their own so that tests/cuda/test_index_kernels_emulated.cpp
// runs them on the CPU under an emulation of CUDA.
#pragma once

#include <cstdint>

#include "cuda/backend/bad_index.cuh"
#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

// dst[off_dst(e) + index[0] step] = src[off_src(e)] for the n elements e of src's shape, g
// their offsets in dst (at position 0) and src; index[0] in [0, last], else recorded as a bad
// index (value, position 0 of 1, limit last + 1) and nothing written. T: an unsigned integer
// of the element's width.
template <class T>
__global__ void copy_at_kernel(int64_t n, Strided<2> g, T* dst, const T* src, const int64_t* index, int64_t step,
                               int64_t last, BadIndexSink sink) {
  const int64_t at = *index;
  if (at < 0 || at > last) {
    if (blockIdx.x == 0 && threadIdx.x == 0) record_bad_index(sink, IndexOp::copy_at, at, 0, 1, last + 1);
    return;
  }
  dst += at * step;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    g.offsets(i, off);
    dst[off[0]] = src[off[1]];
  }
}

__global__ void increment_kernel(int64_t n, int64_t* dst, int64_t value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] += value;
}

}  // namespace

}  // namespace triad::cuda
