// The kernels of the CUDA backend's quantized linear layers (ops::quantized_linear) and of the
// lookup of a packed weight's rows (ops::packed_rows); quantized_linear.cu launches them.
// They read the weight exactly as ops::pack_weight laid it out for the CPU
// (tensor/quantized_matmul.h), so a packed weight moves to a GPU as bytes:
// a tile of 16 columns is contiguous, one run of 4 inputs x 16 columns after another, and
// column c's 4 values of a run are one 32-bit word (at 4 bits the low nibbles of word c, or
// for c >= 8 the high nibbles of word c - 8, sign-extended as they load). The 16 threads of a
// tile's columns read a run whole. They live in a header of their own so that
// tests/cuda/test_quantize_kernels_emulated.cpp runs them on the CPU under an emulation of
// CUDA, against the CPU kernels.
//
// Note [Integer GEMM on the GPU]: int8_linear_kernel computes what the CPU's integer GEMM
// (tensor/cpu/int8_gemm.cpp) computes, bit for bit. The products of the token's and the
// weight's signed integers are summed exactly in int32 per weight group (__dp4a; any order,
// integers are exact; the CPU's u8 activations and its -128 x sum correction give the same
// signed sums), and then each output runs the CPU's f32 chain in the same order, one fused
// multiply-add after another, group after group:
//     acc = fma(float(group sum), scale, acc)
//     acc = fma(float(token's integers summed over the group), offset, acc)  (asymmetric)
//     y   = fma(acc, token scale, bias or 0)
// A block holds one tile of columns and R tokens; its 256 threads first sum the integers of
// up to kChunkItems (group, part) items in parallel (a group cut into `parts` runs of quads
// when there are few groups, so that every thread has work even with one group a row), then
// 16 x R of them run the chains over those groups; then the next chunk of groups.
#pragma once

#include <cstdint>

#include "cuda/backend/bad_index.cuh"

namespace triad::cuda {

namespace {

constexpr int kQlTileCols = 16;                     // columns of a packed tile
constexpr int kQlSlots = 16;                        // threads per column in the summing phase
constexpr int kQlThreads = kQlTileCols * kQlSlots;  // threads of a block
constexpr int kQlChunkItems = 64;                   // (group, part) sums a block holds at once

// The operands of one call (device pointers; shapes as ops::quantized_linear's).
struct QuantizedLinearArgs {
  const int8_t* a = nullptr;        // (m, k) the tokens' integers (int8_linear_kernel)
  const float* x = nullptr;         // (m, k) the tokens in f32 (widened_linear_kernel)
  const float* a_scales = nullptr;  // (m) the tokens' scales
  const int8_t* w = nullptr;        // PackedWeight::data
  const float* scales = nullptr;    // (groups, np)
  const float* offsets = nullptr;   // (groups, np), or null for a symmetric format
  const float* bias = nullptr;      // (n), or null
  float* y = nullptr;               // (m, n)
  int64_t m = 0, n = 0, k = 0, group = 0;
  int parts = 1;  // threads that sum one group's quads (ql_parts)
};

// Threads that sum one group: enough that a chunk of groups keeps the 16 slots busy, at most
// one per quad of the group.
inline int ql_parts(int64_t groups, int64_t group) {
  const int64_t want = (kQlSlots + groups - 1) / groups;
  const int64_t quads = group / 4;
  return int(want < quads ? want : quads);
}

// Column c's 4 values of the run at `run`, as 4 signed bytes.
template <bool FourBits>
__device__ inline int ql_weight_word(const int8_t* run, int c) {
  if constexpr (!FourBits) {
    return reinterpret_cast<const int*>(run)[c];
  } else {
    const unsigned raw = reinterpret_cast<const unsigned*>(run)[c % 8];
    const unsigned nib = (c < 8 ? raw : raw >> 4) & 0x0f0f0f0fu;
    return int(nib | ((nib & 0x08080808u) * 0x1eu));  // each byte's bit 3 copied into its bits 4..7
  }
}

template <int R, bool FourBits, bool Offsets>
__global__ void __launch_bounds__(kQlThreads) int8_linear_kernel(QuantizedLinearArgs p) {
  static __shared__ int s_dot[kQlChunkItems][R][kQlTileCols];
  static __shared__ int s_asum[kQlChunkItems][R];
  const int c = int(threadIdx.x) % kQlTileCols, slot = int(threadIdx.x) / kQlTileCols;
  const int64_t np = (p.n + 31) / 32 * 32, groups = p.k / p.group, quads = p.group / 4;
  const int64_t run_bytes = FourBits ? 32 : 64, tile = blockIdx.x, col = tile * kQlTileCols + c;
  const int8_t* w = p.w + tile * (p.k / 4) * run_bytes;
  const int per_chunk = kQlChunkItems / p.parts;  // groups of a chunk
  const bool chains = slot < R;                   // thread (c, slot) runs token slot's chain of column c
  for (int64_t r0 = int64_t(blockIdx.y) * R; r0 < p.m; r0 += int64_t(gridDim.y) * R) {
    const int* rows[R];  // rows past m read row m - 1; their results are not stored
    for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const int*>(p.a + (r0 + r < p.m ? r0 + r : p.m - 1) * p.k);
    float acc = 0.0f;
    for (int64_t g0 = 0; g0 < groups; g0 += per_chunk) {
      const int64_t chunk = groups - g0 < per_chunk ? groups - g0 : per_chunk;
      for (int item = slot; item < chunk * p.parts; item += kQlSlots) {
        const int64_t g = g0 + item / p.parts, part = item % p.parts;
        const int64_t begin = g * quads + part * quads / p.parts, end = g * quads + (part + 1) * quads / p.parts;
        int dot[R], asum[R];
        for (int r = 0; r < R; ++r) dot[r] = asum[r] = 0;
        for (int64_t q = begin; q < end; ++q) {
          const int wv = ql_weight_word<FourBits>(w + q * run_bytes, c);
          for (int r = 0; r < R; ++r) {
            const int av = rows[r][q];
            dot[r] = __dp4a(av, wv, dot[r]);
            if constexpr (Offsets) asum[r] = __dp4a(av, 0x01010101, asum[r]);
          }
        }
        for (int r = 0; r < R; ++r) s_dot[item][r][c] = dot[r];
        if (Offsets && c == 0)
          for (int r = 0; r < R; ++r) s_asum[item][r] = asum[r];
      }
      __syncthreads();
      if (chains)
        for (int64_t gi = 0; gi < chunk; ++gi) {
          int dot = 0, asum = 0;
          for (int part = 0; part < p.parts; ++part) {
            dot += s_dot[gi * p.parts + part][slot][c];
            if constexpr (Offsets) asum += s_asum[gi * p.parts + part][slot];
          }
          const int64_t at = (g0 + gi) * np + col;
          acc = fmaf(float(dot), p.scales[at], acc);
          if constexpr (Offsets) acc = fmaf(float(asum), p.offsets[at], acc);
        }
      __syncthreads();
    }
    const int64_t row = r0 + slot;
    if (chains && row < p.m && col < p.n)
      p.y[row * p.n + col] = fmaf(acc, p.a_scales[row], p.bias ? p.bias[col] : 0.0f);
  }
}

// Note [Integer GEMM on tensor cores]: int8_mma_linear_kernel computes what
// int8_linear_kernel computes, bit for bit, with each group's integer products summed by
// mma.sync (m16n8k16, 8-bit integers, int32 accumulators: exact, like __dp4a) where a group
// is whole 16-input steps. A warp takes 16 tokens by the block's 32 columns (4 mma tiles of
// 8); its A fragment register is a token's quad of integers as stored, its B fragment
// register a column's word of a run as packed (ql_weight_word), both read straight from
// global memory (the block's 4 warps read the same weight words: the L1 cache serves the
// other three). After a group's steps each output adds its group term to its f32 chain in
// the order of Note [Integer GEMM on the GPU]; the token's integers summed over the group
// (asymmetric formats) come from the same A registers, combined over the quad of lanes that
// holds a token.
constexpr int kQmWarps = 4;
constexpr int kQmThreads = kQmWarps * 32;
constexpr int kQmTokens = 16 * kQmWarps;  // tokens of a block
constexpr int kQmCols = 32;               // columns of a block: two packed tiles

// Whether int8_mma_linear_kernel takes groups of `group` inputs: whole 16-input steps.
inline bool ql_mma_fits(int64_t group) { return group % 16 == 0; }

template <bool FourBits, bool Offsets>
__global__ void __launch_bounds__(kQmThreads) int8_mma_linear_kernel(QuantizedLinearArgs p) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, gid = lane / 4, tig = lane % 4;
  const int64_t np = (p.n + 31) / 32 * 32, groups = p.k / p.group, quads = p.group / 4;
  const int64_t run_bytes = FourBits ? 32 : 64, tile_bytes = (p.k / 4) * run_bytes;
  const int64_t col0 = int64_t(blockIdx.x) * kQmCols;
  const int8_t* w = p.w + (col0 / kQlTileCols) * tile_bytes;  // the block's first tile; the second follows
  for (int64_t r0 = int64_t(blockIdx.y) * kQmTokens; r0 < p.m; r0 += int64_t(gridDim.y) * kQmTokens) {
    const int64_t row[2] = {r0 + 16 * warp + gid, r0 + 16 * warp + gid + 8};  // this lane's tokens
    const int* a[2];  // rows past m read row m - 1; their results are not stored
    for (int h = 0; h < 2; ++h) a[h] = reinterpret_cast<const int*>(p.a + (row[h] < p.m ? row[h] : p.m - 1) * p.k);
    float acc[4][4] = {};
    for (int64_t g = 0; g < groups; ++g) {
      int dot[4][4] = {};
      int asum[2] = {0, 0};
      for (int64_t q = g * quads; q < (g + 1) * quads; q += 4) {  // 16 inputs: 4 quads, one a lane
        const int a0 = a[0][q + tig], a1 = a[1][q + tig];
        if constexpr (Offsets) {
          asum[0] = __dp4a(a0, 0x01010101, asum[0]);
          asum[1] = __dp4a(a1, 0x01010101, asum[1]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int b = ql_weight_word<FourBits>(w + (j / 2) * tile_bytes + (q + tig) * run_bytes, 8 * (j % 2) + gid);
          mma_s8_16816(dot[j], uint32_t(a0), uint32_t(a1), uint32_t(b));
        }
      }
      if constexpr (Offsets) {
        for (int h = 0; h < 2; ++h) {
          asum[h] += __shfl_xor_sync(0xffffffffu, asum[h], 1);
          asum[h] += __shfl_xor_sync(0xffffffffu, asum[h], 2);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t at = g * np + col0 + 8 * j + 2 * tig + i % 2;
          acc[j][i] = fmaf(float(dot[j][i]), p.scales[at], acc[j][i]);
          if constexpr (Offsets) acc[j][i] = fmaf(float(asum[i / 2]), p.offsets[at], acc[j][i]);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t r = row[i / 2], col = col0 + 8 * j + 2 * tig + i % 2;
        if (r < p.m && col < p.n) p.y[r * p.n + col] = fmaf(acc[j][i], p.a_scales[r], p.bias ? p.bias[col] : 0.0f);
      }
  }
}

// ops::quantized_linear at 16 activation bits: y = x w^T + bias in f32, each weight value
// widened as the CPU widens it (value x scale + offset), each output a sequential chain of
// fused multiply-adds over k (the CPU adds its products in SIMD lanes: the two differ by
// f32 rounding). A block: one tile of columns x 16 tokens, a thread per output.
template <bool FourBits, bool Offsets>
__global__ void __launch_bounds__(kQlThreads) widened_linear_kernel(QuantizedLinearArgs p) {
  const int c = int(threadIdx.x) % kQlTileCols, slot = int(threadIdx.x) / kQlTileCols;
  const int64_t np = (p.n + 31) / 32 * 32, run_bytes = FourBits ? 32 : 64;
  const int64_t tile = blockIdx.x, col = tile * kQlTileCols + c;
  const int8_t* w = p.w + tile * (p.k / 4) * run_bytes;
  for (int64_t r0 = int64_t(blockIdx.y) * kQlSlots; r0 < p.m; r0 += int64_t(gridDim.y) * kQlSlots) {
    const int64_t row = r0 + slot;
    const float* x = p.x + (row < p.m ? row : p.m - 1) * p.k;
    float acc = 0.0f;
    for (int64_t q = 0; q < p.k / 4; ++q) {
      const int wv = ql_weight_word<FourBits>(w + q * run_bytes, c);
      const int64_t at = (q * 4 / p.group) * np + col;
      const float s = p.scales[at], o = Offsets ? p.offsets[at] : 0.0f;
      for (int i = 0; i < 4; ++i) {
        const int v = int(int8_t(unsigned(wv) >> (8 * i)));
        acc = fmaf(x[q * 4 + i], fmaf(float(v), s, o), acc);
      }
    }
    if (row < p.m && col < p.n) p.y[row * p.n + col] = acc + (p.bias ? p.bias[col] : 0.0f);
  }
}

// ops::packed_rows: out (m, k) f32, grid-stride over its elements; element (r, i) = value i
// of row idx[r] of the packed weight (w, scales as int8_linear_kernel reads them) times its
// group's scale, computed as the CPU's dequantize_blocks computes it (0 + q s: -0 becomes +0).
// A bad index (outside [0, n)) gives a zero row and is recorded (Note [Deferred device
// errors]).
template <bool FourBits>
__global__ void packed_rows_kernel(const int8_t* w, const float* scales, const int64_t* idx, float* out, int64_t m,
                                   int64_t n, int64_t k, int64_t group, BadIndexSink sink) {
  const int64_t np = (n + 31) / 32 * 32, run_bytes = FourBits ? 32 : 64, total = m * k;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / k, i = t - r * k, row = idx[r];
    if (row < 0 || row >= n) {
      if (i == 0) record_bad_index(sink, IndexOp::embedding, row, r, m, n);
      out[t] = 0.0f;
      continue;
    }
    const int8_t* run = w + ((row / kQlTileCols) * (k / 4) + i / 4) * run_bytes;
    const int word = ql_weight_word<FourBits>(run, int(row % kQlTileCols));
    const int v = int(int8_t(unsigned(word) >> (8 * (i % 4))));
    out[t] = 0.0f + float(v) * scales[(i / group) * np + row];
  }
}

}  // namespace

}  // namespace triad::cuda
