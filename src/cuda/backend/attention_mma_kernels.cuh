// The tensor-core attention kernels (Note [Tensor-core attention], attention_mma.cu), in a
// header of their own so that a CPU test can compile them against an emulation of the
// CUDA pieces they use (tests/cuda/test_attention_mma_emulated.cpp). The includer
// provides nvcuda::wmma first: <mma.h> in attention_mma.cu, the emulation in the test.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>

#include "cuda/backend/attention_common.cuh"

namespace triad::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kMmaThreads = kWarps * 32;
constexpr int kChunks = kTile / 16;  // 16-wide chunks of a tile

// WMMA's element type for a 16-bit dtype.
template <class E>
struct Wmma;
template <>
struct Wmma<BF16> {
  using type = __nv_bfloat16;
};
template <>
struct Wmma<F16> {
  using type = __half;
};

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
template <class W, class Layout>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, W, Layout>;
template <class W, class Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, W, Layout>;

// Row lengths (elements) and sizes (bytes) of the shared tiles at head size HS.
template <int HS>
struct Layout {
  static constexpr int kLd16 = HS + 16;    // q, k, v, dO tiles, 16-bit
  static constexpr int kLdAcc = HS + 8;    // O, dK, dV, dQ tiles, f32
  static constexpr int kLdS = kTile + 8;   // S, dP tiles, f32
  static constexpr int kLdP = kTile + 16;  // P, dS tiles, 16-bit
  static constexpr size_t k16 = size_t(kTile) * kLd16 * 2;
  static constexpr size_t kAcc = size_t(kTile) * kLdAcc * 4;
  static constexpr size_t kS = size_t(kTile) * kLdS * 4;
  static constexpr size_t kP = size_t(kTile) * kLdP * 2;
  static constexpr size_t forward = 3 * k16 + kS + kP + kAcc;
  static constexpr size_t backward = 4 * k16 + 2 * kAcc + 2 * kS + 2 * kP + 2 * kTile * 4;
  static_assert(k16 % 32 == 0 && kAcc % 32 == 0 && kS % 32 == 0 && kP % 32 == 0, "tiles keep 32-byte alignment");
  static_assert(kAcc <= 2 * kS, "the dQ tile fits over S and dP");
};

// Rows first .. first + kTile - 1 of a head, as stored, into a shared tile with rows of
// `ld` elements; zeros past `rows` and past hs. `whole`: hs == HS and every row starts on
// 16 bytes, so 8 elements move a load.
template <int HS>
__device__ void load_tile16(uint16_t* dst, int ld, const uint16_t* src, int64_t stride_t, int64_t first, int64_t rows,
                            int hs, bool whole) {
  if (whole) {
    constexpr int kPerRow = HS / 8;
    for (int e = threadIdx.x; e < kTile * kPerRow; e += blockDim.x) {
      const int r = e / kPerRow, d = (e % kPerRow) * 8;
      const int64_t row = first + r;
      const uint4 x = row < rows ? *reinterpret_cast<const uint4*>(src + row * stride_t + d) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dst + r * ld + d) = x;
    }
    return;
  }
  for (int e = threadIdx.x; e < kTile * HS; e += blockDim.x) {
    const int r = e / HS, d = e % HS;
    const int64_t row = first + r;
    dst[r * ld + d] = row < rows && d < hs ? src[row * stride_t + d] : uint16_t(0);
  }
}

// The column a lane visits in step i of a row half (see the Note).
__device__ inline int staggered(int half, int i, int lane) { return half * 32 + ((i + lane) & 31); }

// dst (16 x 64 f32, row length ldd) = A B^T over HS: A the 16 rows at `a` (ld lda), B the
// 64 rows at `b` (ld ldb), both row-major 16-bit tiles: scores of 16 rows against 64.
template <class W, int HS>
__device__ void scores(float* dst, int ldd, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
  Acc acc[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
  for (int d = 0; d < HS; d += 16) {
    FragA<W, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, reinterpret_cast<const W*>(a + d), lda);
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      FragB<W, wmma::col_major> fb;  // rows 16 j .. 16 j + 15 of B, transposed: column-major
      wmma::load_matrix_sync(fb, reinterpret_cast<const W*>(b + 16 * j * ldb + d), ldb);
      wmma::mma_sync(acc[j], fa, fb, acc[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < kChunks; ++j) wmma::store_matrix_sync(dst + 16 * j, acc[j], ldd, wmma::mem_row_major);
}

// acc += A B for a 16 x 64 A and a 64 x 16 B (16-bit tiles in shared memory, A in
// `LayoutA`, B row-major): their kk-th 16 x 16 blocks start at a + kk a_step and
// b + kk b_step.
template <class W, class LayoutA>
__device__ void accumulate(Acc& acc, const uint16_t* a, int lda, int a_step, const uint16_t* b, int ldb, int b_step) {
#pragma unroll
  for (int kk = 0; kk < kChunks; ++kk) {
    FragA<W, LayoutA> fa;
    FragB<W, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, reinterpret_cast<const W*>(a + kk * a_step), lda);
    wmma::load_matrix_sync(fb, reinterpret_cast<const W*>(b + kk * b_step), ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// ---- forward ----

template <class E, int HS>
__global__ void __launch_bounds__(kMmaThreads)
    mma_attention_kernel(Operand q, Operand k, Operand v, uint16_t* out, float* lse, Geometry g, unsigned whole) {
  using L = Layout<HS>;
  using W = typename Wmma<E>::type;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);               // (kTile, kLd16) queries
  uint16_t* sk = sq + kTile * L::kLd16;                            // (kTile, kLd16) keys
  uint16_t* sv = sk + kTile * L::kLd16;                            // (kTile, kLd16) values
  float* ss = reinterpret_cast<float*>(sv + kTile * L::kLd16);     // (kTile, kLdS) scores
  uint16_t* sp = reinterpret_cast<uint16_t*>(ss + kTile * L::kLdS);  // (kTile, kLdP) P
  float* so = reinterpret_cast<float*>(sp + kTile * L::kLdP);        // (kTile, kLdAcc) O

  const int64_t bh = blockIdx.x;
  const int64_t q0 = int64_t(gridDim.y - 1 - blockIdx.y) * kTile;  // heaviest tiles first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = 16 * warp + lane / 2, half = lane % 2;  // the row this lane pair softmaxes
  const int64_t row = q0 + r, tk = g.keys(), offset = tk - g.tq, first_key = g.first_key(bh);
  const uint16_t* kp = k.head<uint16_t>(bh, g.heads);
  const uint16_t* vp = v.head<uint16_t>(bh, g.heads);
  load_tile16<HS>(sq, L::kLd16, q.head<uint16_t>(bh, g.heads), q.stride_t, q0, g.tq, g.hs, whole & 1u);
  for (int e = lane; e < 16 * HS; e += 32) so[(16 * warp + e / HS) * L::kLdAcc + e % HS] = 0.0f;

  float m = -INFINITY, l = 0.0f;  // the row's running max (base 2) and sum, in both lanes
  const int64_t k_end = (q0 + kTile < g.tq ? q0 + kTile : g.tq) + offset;  // keys the last row sees
  for (int64_t k0 = (first_key < k_end ? first_key : k_end) / kTile * kTile; k0 < k_end; k0 += kTile) {
    __syncthreads();  // the previous tile's readers of sk, sv are done
    load_tile16<HS>(sk, L::kLd16, kp, k.stride_t, k0, tk, g.hs, whole & 2u);
    load_tile16<HS>(sv, L::kLd16, vp, v.stride_t, k0, tk, g.hs, whole & 4u);
    __syncthreads();

    scores<W, HS>(ss + 16 * warp * L::kLdS, L::kLdS, sq + 16 * warp * L::kLd16, L::kLd16, sk, L::kLd16);
    __syncwarp();

    // Online softmax of the row over this tile's keys. A row that has seen no key yet (all
    // before its first key) keeps max -inf, and its terms are 0.
    const float* srow = ss + r * L::kLdS;
    float mx = m;
    for (int i = 0; i < 32; ++i) {
      const int c = staggered(half, i, lane);
      const int64_t key = k0 + c;
      if (key >= first_key && key <= row + offset && key < tk) mx = fmaxf(mx, srow[c] * g.scale_log2);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float base = mx == -INFINITY ? 0.0f : mx;
    const float alpha = exp2f(m - base);  // 0 on the row's first keys
    float sum = 0.0f;
    uint16_t* prow = sp + r * L::kLdP;
    for (int i = 0; i < 32; ++i) {
      const int c = staggered(half, i, lane);
      const int64_t key = k0 + c;
      const float p =
          key >= first_key && key <= row + offset && key < tk ? exp2f(srow[c] * g.scale_log2 - base) : 0.0f;
      sum += p;
      E::store(prow, c, p);
    }
    l = l * alpha + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
    m = mx;
    float* orow = so + r * L::kLdAcc;
    for (int c = half * (HS / 2); c < (half + 1) * (HS / 2); ++c) orow[c] *= alpha;
    __syncwarp();

    // O += P V for the warp's rows.
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      Acc o;
      float* tile = so + 16 * warp * L::kLdAcc + 16 * n;
      wmma::load_matrix_sync(o, tile, L::kLdAcc, wmma::mem_row_major);
      accumulate<W, wmma::row_major>(o, sp + 16 * warp * L::kLdP, L::kLdP, 16, sv + 16 * n, L::kLd16, 16 * L::kLd16);
      wmma::store_matrix_sync(tile, o, L::kLdAcc, wmma::mem_row_major);
    }
  }
  __syncwarp();  // the warp's O is stored

  if (row >= g.tq) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // 0: a query before its row's first key
  const float* orow = so + r * L::kLdAcc;
  uint16_t* dst = out + (bh * g.tq + row) * g.hs;
  for (int c = half; c < g.hs; c += 2) E::store(dst, c, orow[c] * inv);
  if (half == 0) lse[bh * g.tq + row] = l > 0.0f ? (m + log2f(l)) * kLn2 : INFINITY;
}

// ---- backward ----

template <class E, int HS>
__global__ void __launch_bounds__(kMmaThreads)
    mma_attention_backward_kernel(Operand q, Operand k, Operand v, Operand grad, const float* lse, const float* dsum,
                                  float* dq, uint16_t* dk, uint16_t* dv, float scale, Geometry g, unsigned whole) {
  using L = Layout<HS>;
  using W = typename Wmma<E>::type;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem);                 // (kTile, kLd16) keys of this block
  uint16_t* sv = sk + kTile * L::kLd16;                              // (kTile, kLd16) values of this block
  uint16_t* sq = sv + kTile * L::kLd16;                              // (kTile, kLd16) queries of the tile
  uint16_t* sg = sq + kTile * L::kLd16;                              // (kTile, kLd16) dO of the tile
  float* sdk = reinterpret_cast<float*>(sg + kTile * L::kLd16);      // (kTile, kLdAcc) dK / scale
  float* sdv = sdk + kTile * L::kLdAcc;                              // (kTile, kLdAcc) dV
  float* ss = sdv + kTile * L::kLdAcc;                               // (kTile, kLdS) S
  float* sdp = ss + kTile * L::kLdS;                                 // (kTile, kLdS) dP
  float* sdq = ss;                                                   // (kTile, kLdAcc) dQ, over S and dP
  uint16_t* sp = reinterpret_cast<uint16_t*>(sdp + kTile * L::kLdS);  // (kTile, kLdP) P
  uint16_t* sds = sp + kTile * L::kLdP;                               // (kTile, kLdP) dS
  float* s_lse = reinterpret_cast<float*>(sds + kTile * L::kLdP);     // (kTile) lse of the tile's rows, base 2
  float* s_d = s_lse + kTile;                                         // (kTile) D of the tile's rows

  const int64_t bh = blockIdx.x;
  const int64_t k0 = int64_t(blockIdx.y) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = 16 * warp + lane / 2, half = lane % 2;  // the query row this lane pair works on
  const int64_t offset = g.tk - g.tq, first_key = g.first_key(bh);
  const uint16_t* qp = q.head<uint16_t>(bh, g.heads);
  const uint16_t* gp = grad.head<uint16_t>(bh, g.heads);
  load_tile16<HS>(sk, L::kLd16, k.head<uint16_t>(bh, g.heads), k.stride_t, k0, g.tk, g.hs, whole & 2u);
  load_tile16<HS>(sv, L::kLd16, v.head<uint16_t>(bh, g.heads), v.stride_t, k0, g.tk, g.hs, whole & 4u);
  for (int e = threadIdx.x; e < kTile * L::kLdAcc; e += blockDim.x) sdk[e] = sdv[e] = 0.0f;

  // The first query tile with a row that sees key k0: rows i >= k0 - offset.
  const int64_t first = (k0 > offset ? k0 - offset : 0) / kTile * kTile;
  for (int64_t q0 = first; q0 < g.tq; q0 += kTile) {
    __syncthreads();  // the previous tile's readers of sq, sg, sdq, s_lse, s_d are done
    load_tile16<HS>(sq, L::kLd16, qp, q.stride_t, q0, g.tq, g.hs, whole & 1u);
    load_tile16<HS>(sg, L::kLd16, gp, grad.stride_t, q0, g.tq, g.hs, whole & 8u);
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      const bool real = q0 + i < g.tq;
      s_lse[i] = real ? lse[bh * g.tq + q0 + i] * kLog2e : 0.0f;
      s_d[i] = real ? dsum[bh * g.tq + q0 + i] : 0.0f;
    }
    __syncthreads();

    // S = Q K^T and dP = dO V^T for the warp's 16 query rows.
    scores<W, HS>(ss + 16 * warp * L::kLdS, L::kLdS, sq + 16 * warp * L::kLd16, L::kLd16, sk, L::kLd16);
    scores<W, HS>(sdp + 16 * warp * L::kLdS, L::kLdS, sg + 16 * warp * L::kLd16, L::kLd16, sv, L::kLd16);
    __syncwarp();

    // P = exp(S - lse) and dS = P o (dP - D) for the lane pair's row.
    {
      const int64_t row = q0 + r;
      const float lse2 = s_lse[r], d = s_d[r];
      for (int i = 0; i < 32; ++i) {
        const int c = staggered(half, i, lane);
        const int64_t key = k0 + c;
        const bool seen = row < g.tq && key < g.tk && key <= row + offset && key >= first_key;
        const float p = seen ? exp2f(ss[r * L::kLdS + c] * g.scale_log2 - lse2) : 0.0f;
        E::store(sp + r * L::kLdP, c, p);
        E::store(sds + r * L::kLdP, c, p * (sdp[r * L::kLdS + c] - d));
      }
    }
    __syncthreads();  // P and dS complete; S and dP read for the last time

    // dV += P^T dO and dK += dS^T Q for the warp's 16 keys: P^T and dS^T are P and dS
    // read column-major.
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      Acc av, ak;
      float* tv = sdv + 16 * warp * L::kLdAcc + 16 * n;
      float* tk = sdk + 16 * warp * L::kLdAcc + 16 * n;
      wmma::load_matrix_sync(av, tv, L::kLdAcc, wmma::mem_row_major);
      wmma::load_matrix_sync(ak, tk, L::kLdAcc, wmma::mem_row_major);
      accumulate<W, wmma::col_major>(av, sp + 16 * warp, L::kLdP, 16 * L::kLdP, sg + 16 * n, L::kLd16, 16 * L::kLd16);
      accumulate<W, wmma::col_major>(ak, sds + 16 * warp, L::kLdP, 16 * L::kLdP, sq + 16 * n, L::kLd16, 16 * L::kLd16);
      wmma::store_matrix_sync(tv, av, L::kLdAcc, wmma::mem_row_major);
      wmma::store_matrix_sync(tk, ak, L::kLdAcc, wmma::mem_row_major);
    }

    // dQ = dS K for the warp's 16 query rows, through the shared tile into dq.
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      Acc aq;
      wmma::fill_fragment(aq, 0.0f);
      accumulate<W, wmma::row_major>(aq, sds + 16 * warp * L::kLdP, L::kLdP, 16, sk + 16 * n, L::kLd16, 16 * L::kLd16);
      wmma::store_matrix_sync(sdq + 16 * warp * L::kLdAcc + 16 * n, aq, L::kLdAcc, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < 16 * g.hs; e += 32) {
      const int rr = 16 * warp + e / g.hs, c = e % g.hs;
      const int64_t row = q0 + rr;
      if (row < g.tq) atomicAdd(dq + (bh * g.tq + row) * g.hs + c, sdq[rr * L::kLdAcc + c] * scale);
    }
  }
  __syncthreads();  // every warp's dK and dV are stored

  for (int e = threadIdx.x; e < kTile * g.hs; e += blockDim.x) {
    const int rr = e / g.hs, c = e % g.hs;
    const int64_t key = k0 + rr;
    if (key >= g.tk) continue;
    const int64_t at = (bh * g.tk + key) * g.hs + c;
    E::store(dk, at, sdk[rr * L::kLdAcc + c] * scale);
    E::store(dv, at, sdv[rr * L::kLdAcc + c]);
  }
}

// ---- launching (host) ----

// Bit i set where operand i (q, k, v, dO) can be loaded 8 elements at a time: head size
// HS, and every head and row starting on 16 bytes.
template <int HS>
unsigned whole_rows(std::initializer_list<const Tensor*> operands) {
  unsigned bits = 0, bit = 1;
  for (const Tensor* t : operands) {
    if (t->size(3) == HS && reinterpret_cast<uintptr_t>(t->raw_data()) % 16 == 0 && t->stride(0) % 8 == 0 &&
        t->stride(1) % 8 == 0 && t->stride(2) % 8 == 0)
      bits |= bit;
    bit <<= 1;
  }
  return bits;
}

}  // namespace

}  // namespace triad::cuda
