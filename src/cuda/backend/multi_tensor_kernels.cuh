// Multi-tensor optimizer kernels (optim.cu launches them): one launch updates many
// parameters, as Apex's multi_tensor_apply. Note [Multi-tensor optimizer]:
// - An optimizer step touches every parameter once and is memory-bound; launched tensor by
//   tensor it costs a launch per parameter (hundreds in a model), each too small to fill
//   the device. Here the host cuts each tensor into chunks of `chunk` elements and fills a
//   table of (tensor, chunk) pairs, one per block, which travels as the kernel's argument
//   (no copy to the device, nothing for a CUDA graph to miss); a table holds up to
//   kTableTensors tensors and kTableBlocks chunks (under the 4 KiB of kernel arguments),
//   and a larger update takes one launch per table, a tensor continuing in the next.
// - Each entry carries its own constants (a parameter's own bias correction, a group's
//   weight decay), so one launch serves tensors of different groups and steps.
// - The elements' arithmetic is tensor/optimizer_math.h's, the CPU backend's own: a GPU
//   step and a CPU step differ only where the two compilers contract a multiply and an add
//   into one FMA differently (a unit in the last place now and then).
// The kernels and the table builder live in this header so that
// tests/cuda/test_optim_kernels_emulated.cpp runs them on the CPU under the emulation.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/backend/launch.cuh"
#include "tensor/optimizer_math.h"

namespace triad::cuda {

constexpr int kTableTensors = 24;
constexpr int kTableBlocks = 320;
constexpr int kTableThreads = 512;       // threads of a block (320 of them fill most of an H100's SMs)
constexpr int64_t kTensorChunk = 65536;  // elements a block updates (128 per thread)

// Up to kTableTensors entries and the chunk each block of one launch takes.
template <class Entry>
struct TensorTable {
  Entry entry[kTableTensors];
  int64_t chunk = kTensorChunk;
  uint8_t tensor_of[kTableBlocks];  // block b updates entry[tensor_of[b]] ...
  int32_t chunk_of[kTableBlocks];   // ... elements [chunk_of[b] chunk, + chunk)
};

// Cuts the entries (each with an element count `n`) into tables and hands each to
// launch(table, blocks), in order. A tensor of more chunks than a table holds continues in
// the next table.
template <class Entry, class Launch>
void for_each_table(const std::vector<Entry>& entries, Launch&& launch, int64_t chunk = kTensorChunk) {
  TensorTable<Entry> table;
  table.chunk = chunk;
  int tensors = 0, blocks = 0;
  for (const Entry& e : entries) {
    const int64_t chunks = (e.n + chunk - 1) / chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || blocks == 0) table.entry[tensors++] = e;  // its first chunk here
      table.tensor_of[blocks] = uint8_t(tensors - 1);
      table.chunk_of[blocks] = int32_t(c);
      ++blocks;
      // Full: the next chunk (or tensor) finds no room.
      const bool last_chunk = c + 1 == chunks;
      if (blocks == kTableBlocks || (last_chunk && tensors == kTableTensors)) {
        launch(table, blocks);
        tensors = blocks = 0;
      }
    }
  }
  if (blocks > 0) launch(table, blocks);
}

// The update of one block's chunk: entry.update(i) for each of its elements. The table is
// read where the launch left it (__grid_constant__: no per-thread copy of it).
template <class Entry>
__global__ void multi_tensor_kernel(const __grid_constant__ TensorTable<Entry> table) {
  const Entry& e = table.entry[table.tensor_of[blockIdx.x]];
  const int64_t begin = int64_t(table.chunk_of[blockIdx.x]) * table.chunk;
  const int64_t end = e.n < begin + table.chunk ? e.n : begin + table.chunk;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) e.update(i);
}

// One parameter's Adam update (ops::adamw_) in f32; copy.data null: no 16-bit copy.
struct AdamWEntry {
  float* p;
  const float* g;
  float* m;
  float* v;
  Floats copy;
  int64_t n;
  AdamWConstants<float> k;
  const AdamWConstants<float>* live;  // non-null: the constants in device memory, read in place of k

  __device__ void update(int64_t i) const {
    const AdamWConstants<float>& c = live ? *live : k;
    if (c.skip != 0.0f) return;
    const float pi = adamw_element(p[i], m[i], v[i], g[i], c);
    if (copy.data) copy.store(i, pi);
  }
};

// One parameter's SGD update (ops::sgd_) in f32; buf null: no momentum.
struct SGDEntry {
  float* p;
  const float* g;
  float* buf;
  int64_t n;
  SGDConstants<float> k;

  __device__ void update(int64_t i) const { sgd_element(p[i], buf ? buf + i : nullptr, g[i], k); }
};

// One f32 gradient clipped to max_norm (ops::clip_to_norm_) by the norm whose square lies
// at `squared` in device memory, multiplied as the CPU's mul_ does (by the factor in f32).
struct ClipEntry {
  float* g;
  int64_t n;
  const double* squared;
  double max_norm;

  __device__ void update(int64_t i) const {
    const double coef = clip_factor(sqrt(*squared), max_norm);
    if (coef < 1.0) g[i] *= float(coef);
  }
};

// One f32 tensor multiplied by the factor at `factor` in device memory (ops::mul_by_), as
// the CPU's mul_ does (by the factor in f32).
struct ScaleEntry {
  float* t;
  int64_t n;
  const double* factor;

  __device__ void update(int64_t i) const { t[i] *= float(*factor); }
};

static_assert(sizeof(TensorTable<AdamWEntry>) <= 4000 && sizeof(TensorTable<SGDEntry>) <= 4000,
              "a table travels as a kernel argument: at most 4 KiB with the rest");

}  // namespace triad::cuda
