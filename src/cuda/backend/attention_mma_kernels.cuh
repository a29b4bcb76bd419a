// The tensor-core attention kernels (Note [Tensor-core attention], attention_mma.cu), in a
// header of their own so that a CPU test can compile them against an emulation of the
// CUDA pieces they use (tests/cuda/test_attention_mma_emulated.cpp). The includer
// provides the warp-level instructions first: cuda/backend/mma_sync.cuh in
// attention_mma.cu, the emulation in the test.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>

#include "cuda/backend/attention_common.cuh"

namespace triad::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMmaThreads = kWarps * 32;
constexpr int kLdP = kTile + 8;  // row length of the backward's dS^T tile (elements)

// The mma.sync input type of a 16-bit dtype.
template <class E>
struct Mma;
template <>
struct Mma<BF16> {
  using type = __nv_bfloat16;
};
template <>
struct Mma<F16> {
  using type = __half;
};

// Shared tiles at head size HS: rows of HS + 8 elements (16 bytes of padding put the 8
// rows an ldmatrix reads on 8 different 16-byte bank groups).
template <int HS>
struct Layout {
  static constexpr int kLd = HS + 8;
  static constexpr size_t kTileBytes = size_t(kTile) * kLd * 2;
  // The forward's 16-row blocks of queries per warp: two up to head size 64 (each key and
  // value fragment read from shared memory serves both), one above (registers).
  static constexpr int kM = HS <= 64 ? 2 : 1;
  static constexpr int kQueryRows = 16 * kWarps * kM;  // a forward block's queries
  // kM query tiles, then k and v twice (the next key tile loads while this one is used).
  static constexpr size_t forward = (kM + 4) * kTileBytes;
  // k, v, then q and dO twice; dS^T; lse and D of two query tiles.
  static constexpr size_t backward = 6 * kTileBytes + size_t(kTile) * kLdP * 2 + 4 * kTile * 4;
};

// Rows first .. first + kRows - 1 of a head, as stored, into a shared tile; zeros past
// `rows` and past hs. `whole`: hs == HS and every row starts on 16 bytes, so rows move 16
// bytes at a time by cp.async, complete after cp_async_wait_all.
template <int HS, int kRows = kTile>
__device__ void load_tile(uint16_t* dst, const uint16_t* src, int64_t stride_t, int64_t first, int64_t rows, int hs,
                          bool whole) {
  constexpr int kLd = Layout<HS>::kLd;
  if (whole) {
    constexpr int kPerRow = HS / 8;
    for (int e = threadIdx.x; e < kRows * kPerRow; e += blockDim.x) {
      const int r = e / kPerRow, d = (e % kPerRow) * 8;
      const int64_t row = first + r;
      uint16_t* to = dst + r * kLd + d;
      if (row < rows)
        cp_async_16(to, src + row * stride_t + d);
      else
        *reinterpret_cast<uint4*>(to) = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  for (int e = threadIdx.x; e < kRows * HS; e += blockDim.x) {
    const int r = e / HS, d = e % HS;
    const int64_t row = first + r;
    dst[r * kLd + d] = row < rows && d < hs ? src[row * stride_t + d] : uint16_t(0);
  }
}

// Two floats as a pair of dtype E, the first in the low half (an A fragment register).
template <class E>
__device__ inline uint32_t pack2(float lo, float hi) {
  uint16_t h[2];
  E::store(h, 0, lo);
  E::store(h, 1, hi);
  return uint32_t(h[0]) | uint32_t(h[1]) << 16;
}

// The A fragment of 16-wide chunk kk of the 16 x 64 tile held as the C fragments c[8]
// (columns 8 j .. 8 j + 7 in c[j]): rounded to E.
template <class E>
__device__ inline void to_a_fragment(uint32_t (&a)[4], const float (&c)[8][4], int kk) {
  a[0] = pack2<E>(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack2<E>(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack2<E>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack2<E>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// Lane addresses for ldmatrix_x4 on a row-major 16-bit tile with rows of ld elements:
// - a_rows: the A fragment of the 16 x 16 block at (row, col);
// - bt_rows: the B fragments of two n-tiles, B = the transpose of the 16 x 16 block at
//   (row, col) (its rows are B's columns): registers 0, 1 for rows row .. row + 7, 2, 3 for
//   row + 8 .. row + 15;
// - b_rows (with ldmatrix_x4_trans): the B fragments of two n-tiles, B = the 16 x 16 block
//   at (row, col): registers 0, 1 for columns col .. col + 7, 2, 3 for col + 8 .. col + 15;
// - at_rows (with ldmatrix_x4_trans): the A fragment of the transpose of the block.
__device__ inline const uint16_t* a_rows(const uint16_t* t, int ld, int row, int col, int lane) {
  return t + (row + lane % 16) * ld + col + 8 * (lane / 16);
}
__device__ inline const uint16_t* bt_rows(const uint16_t* t, int ld, int row, int col, int lane) {
  return t + (row + lane % 8 + 8 * (lane / 16)) * ld + col + 8 * (lane / 8 % 2);
}
__device__ inline const uint16_t* b_rows(const uint16_t* t, int ld, int row, int col, int lane) {
  return t + (row + lane % 8 + 8 * (lane / 8 % 2)) * ld + col + 8 * (lane / 16);
}
__device__ inline const uint16_t* at_rows(const uint16_t* t, int ld, int row, int col, int lane) {
  return t + (row + lane % 8 + 8 * (lane / 16)) * ld + col + 8 * (lane / 8 % 2);
}

// c[M][8] += A B^T over HS: A as the fragments a[M][HS / 16] (M blocks of 16 rows), B the
// 64 rows of the shared tile t (rows of ld elements): scores of 16 M rows against 64. Each
// B fragment is read once for the M blocks.
template <class W, int HS, int M>
__device__ inline void scores(float (&c)[M][8][4], const uint32_t (&a)[M][HS / 16][4], const uint16_t* t, int ld,
                              int lane) {
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk)
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      uint32_t b[4];
      ldmatrix_x4(b, bt_rows(t, ld, 16 * jj, 16 * kk, lane));
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        mma_16816<W>(c[mi][2 * jj], a[mi][kk], b[0], b[1]);
        mma_16816<W>(c[mi][2 * jj + 1], a[mi][kk], b[2], b[3]);
      }
    }
}

// acc[M][HS / 8] += A B: A the M 16 x 64 tiles held as C fragments c[M][8] (rounded to E),
// B the 64 x HS shared tile t (rows of ld elements), each of its fragments read once.
template <class E, class W, int HS, int M>
__device__ inline void accumulate(float (&acc)[M][HS / 8][4], const float (&c)[M][8][4], const uint16_t* t, int ld,
                                  int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[M][4];
#pragma unroll
    for (int mi = 0; mi < M; ++mi) to_a_fragment<E>(a[mi], c[mi], kk);
#pragma unroll
    for (int dd = 0; dd < HS / 16; ++dd) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_rows(t, ld, 16 * kk, 16 * dd, lane));
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        mma_16816<W>(acc[mi][2 * dd], a[mi], b[0], b[1]);
        mma_16816<W>(acc[mi][2 * dd + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// ---- forward ----

template <class E, int HS>
__global__ void __launch_bounds__(kMmaThreads)
    mma_attention_kernel(Operand q, Operand k, Operand v, Destination out, float* lse, Geometry g, unsigned whole) {
  using L = Layout<HS>;
  using W = typename Mma<E>::type;
  constexpr int kLd = L::kLd, M = L::kM;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);  // (kQueryRows, kLd) queries
  uint16_t* skv = sq + L::kQueryRows * kLd;          // keys and values, twice: k0, v0, k1, v1

  const int64_t bh = blockIdx.x;
  const int64_t q0 = int64_t(gridDim.y - 1 - blockIdx.y) * L::kQueryRows;  // heaviest tiles first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int64_t tk = g.keys(), offset = tk - g.tq, first_key = g.first_key(bh);
  const int64_t warp_row = q0 + 16 * M * warp;  // the warp's first query; this lane's rows:
  // warp_row + 16 mi + gid and that + 8, for mi < M
  const uint16_t* kp = k.head<uint16_t>(g.kv_head(bh), g.kv_heads());
  const uint16_t* vp = v.head<uint16_t>(g.kv_head(bh), g.kv_heads());
  const int64_t q_end = q0 + L::kQueryRows < g.tq ? q0 + L::kQueryRows : g.tq;
  const int64_t k_end = q_end + offset;  // keys the last row sees
  const int64_t k_begin = (first_key < k_end ? first_key : k_end) / kTile * kTile;
  auto load_keys = [&](int64_t k0, int buf) {
    load_tile<HS>(skv + 2 * buf * kTile * kLd, kp, k.stride_t, k0, tk, g.hs, whole & 2u);
    load_tile<HS>(skv + (2 * buf + 1) * kTile * kLd, vp, v.stride_t, k0, tk, g.hs, whole & 4u);
  };
  load_tile<HS, L::kQueryRows>(sq, q.head<uint16_t>(bh, g.heads), q.stride_t, q0, g.tq, g.hs, whole & 1u);
  if (k_begin < k_end) load_keys(k_begin, 0);
  cp_async_commit();

  uint32_t qa[M][HS / 16][4];  // the warp's queries as A fragments
  float o[M][HS / 8][4] = {};  // O, unnormalized
  float m[M][2], l[M][2];      // running max (base 2), this lane's part of the sum
#pragma unroll
  for (int mi = 0; mi < M; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.0f;
  int buf = 0;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kTile, buf ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // tile k0 is in; every warp is done with the buffer the next tile goes to
    if (k0 == k_begin)
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int kk = 0; kk < HS / 16; ++kk)
          ldmatrix_x4(qa[mi][kk], a_rows(sq, kLd, 16 * (M * warp + mi), 16 * kk, lane));
    if (k0 + kTile < k_end) load_keys(k0 + kTile, buf ^ 1);
    cp_async_commit();
    const uint16_t* sk = skv + 2 * buf * kTile * kLd;
    const uint16_t* sv = sk + kTile * kLd;

    float s[M][8][4] = {};
    scores<W, HS, M>(s, qa, sk, kLd, lane);

    // Scores in base 2; keys a row does not see at -inf (only on tiles that hold some).
    const bool edge = k0 < first_key || k0 + kTile > tk || k0 + kTile - 1 > warp_row + offset;
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      float mx[2] = {m[mi][0], m[mi][1]};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float x = s[mi][j][i] * g.scale_log2;
          if (edge) {
            const int64_t key = k0 + 8 * j + 2 * tig + i % 2, row = warp_row + 16 * mi + gid + 8 * (i / 2);
            if (key < first_key || key > row + offset || key >= tk) x = -INFINITY;
          }
          s[mi][j][i] = x;
          mx[i / 2] = fmaxf(mx[i / 2], x);
        }
      // Online softmax: a row's max over the quad that holds it, then P = 2^(s - max). A
      // row that has seen no key yet keeps max -inf, and its terms are 0.
      float base[2], alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        base[h] = mx[h] == -INFINITY ? 0.0f : mx[h];
        alpha[h] = exp2f(m[mi][h] - base[h]);  // 0 on the row's first keys
        m[mi][h] = mx[h];
      }
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float p = exp2f(s[mi][j][i] - base[i / 2]);
          s[mi][j][i] = p;
          sum[i / 2] += p;
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) l[mi][h] = l[mi][h] * alpha[h] + sum[h];
#pragma unroll
      for (int n = 0; n < HS / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[mi][n][i] *= alpha[i / 2];
    }

    accumulate<E, W, HS, M>(o, s, sv, kLd, lane);  // O += P V
  }
  cp_async_wait_all();

#pragma unroll
  for (int mi = 0; mi < M; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mi][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int64_t row = warp_row + 16 * mi + gid + 8 * h;
      if (row >= g.tq) continue;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // 0: a query before its row's first key
      uint16_t* dst = out.row<uint16_t>(bh, g.heads, row);
#pragma unroll
      for (int n = 0; n < HS / 8; ++n)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int c = 8 * n + 2 * tig + i;
          if (c < g.hs) E::store(dst, c, o[mi][n][2 * h + i] * inv);
        }
      if (tig == 0) lse[bh * g.tq + row] = sum > 0.0f ? (m[mi][h] + log2f(sum)) * kLn2 : INFINITY;
    }
}

// ---- backward ----

template <class E, int HS>
__global__ void __launch_bounds__(kMmaThreads)
    mma_attention_backward_kernel(Operand q, Operand k, Operand v, Operand grad, const float* lse, const float* dsum,
                                  Destination dq, Destination dk, Destination dv, float scale, Geometry g, unsigned whole) {
  using L = Layout<HS>;
  using W = typename Mma<E>::type;
  constexpr int kLd = L::kLd;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem);             // (kTile, kLd) keys of this block
  uint16_t* sv = sk + kTile * kLd;                              // (kTile, kLd) values of this block
  uint16_t* sqg = sv + kTile * kLd;                             // queries and dO of a tile, twice: q0, dO0, q1, dO1
  uint16_t* sds = sqg + 4 * kTile * kLd;                        // (kTile, kLdP) dS^T: keys by queries
  float* s_row = reinterpret_cast<float*>(sds + kTile * kLdP);  // lse (base 2) and D of a tile's rows, twice

  const int64_t bkv = blockIdx.x;  // the key/value head (b NKV + j) whose key tile this block owns
  const int64_t k0 = int64_t(blockIdx.y) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int64_t offset = g.tk - g.tq, first_key = g.first_key(g.query_head(bkv, 0));
  const int64_t key0 = k0 + 16 * warp + gid;  // this lane's keys: key0 and key0 + 8
  // The query tiles that see key k0 (rows i >= k0 - offset: from tile `first` on) of every
  // query head that reads this key/value head, head after head (the group's query heads
  // are consecutive: b NH + j group + r).
  const int64_t first = (k0 > offset ? k0 - offset : 0) / kTile * kTile;
  const int64_t steps = first < g.tq ? (g.tq - first + kTile - 1) / kTile * g.group : 0;
  auto load_queries = [&](int64_t bh, int64_t q0, int buf) {
    load_tile<HS>(sqg + 2 * buf * kTile * kLd, q.head<uint16_t>(bh, g.heads), q.stride_t, q0, g.tq, g.hs, whole & 1u);
    load_tile<HS>(sqg + (2 * buf + 1) * kTile * kLd, grad.head<uint16_t>(bh, g.heads), grad.stride_t, q0, g.tq, g.hs,
                  whole & 8u);
    float* rows = s_row + 2 * buf * kTile;
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      const bool real = q0 + i < g.tq;
      rows[i] = real ? lse[bh * g.tq + q0 + i] * kLog2e : 0.0f;
      rows[kTile + i] = real ? dsum[bh * g.tq + q0 + i] : 0.0f;
    }
  };
  load_tile<HS>(sk, k.head<uint16_t>(bkv, g.kv_heads()), k.stride_t, k0, g.tk, g.hs, whole & 2u);
  load_tile<HS>(sv, v.head<uint16_t>(bkv, g.kv_heads()), v.stride_t, k0, g.tk, g.hs, whole & 4u);
  int64_t bh = g.query_head(bkv, 0), q0 = first;  // the tile of the current step
  if (steps > 0) load_queries(bh, q0, 0);
  cp_async_commit();

  float dk_acc[1][HS / 8][4] = {}, dv_acc[1][HS / 8][4] = {};  // the warp's 16 keys' dK / scale and dV
  int buf = 0;
  for (int64_t step = 0; step < steps; ++step, buf ^= 1) {
    const int64_t next_q0 = q0 + kTile < g.tq ? q0 + kTile : first, next_bh = next_q0 == first ? bh + 1 : bh;
    cp_async_wait_all();
    __syncthreads();  // tile q0 is in; every warp is done with the last tile's buffers and dS^T
    if (step + 1 < steps) load_queries(next_bh, next_q0, buf ^ 1);
    cp_async_commit();
    const uint16_t* sq = sqg + 2 * buf * kTile * kLd;
    const uint16_t* sg = sq + kTile * kLd;
    const float* s_lse = s_row + 2 * buf * kTile;
    const float* s_d = s_lse + kTile;

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys against the tile's 64 queries.
    float st[1][8][4] = {}, dpt[1][8][4] = {};
    {
      uint32_t ka[1][HS / 16][4], va[1][HS / 16][4];
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) {
        ldmatrix_x4(ka[0][kk], a_rows(sk, kLd, 16 * warp, 16 * kk, lane));
        ldmatrix_x4(va[0][kk], a_rows(sv, kLd, 16 * warp, 16 * kk, lane));
      }
      scores<W, HS, 1>(st, ka, sq, kLd, lane);
      scores<W, HS, 1>(dpt, va, sg, kLd, lane);
    }

    // P^T = 2^(S^T scale log2 e - lse) and dS^T = P^T o (dP^T - D), zero where the query
    // does not see the key.
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = 8 * j + 2 * tig + i % 2;
        const int64_t key = key0 + 8 * (i / 2), query = q0 + c;
        const bool seen = query < g.tq && key < g.tk && key <= query + offset && key >= first_key;
        const float p = seen ? exp2f(st[0][j][i] * g.scale_log2 - s_lse[c]) : 0.0f;
        st[0][j][i] = p;
        dpt[0][j][i] = p * (dpt[0][j][i] - s_d[c]);
      }

    // dV += P^T dO and dK += dS^T Q; dS^T (rounded to E) into shared memory for dQ.
    accumulate<E, W, HS, 1>(dv_acc, st, sg, kLd, lane);
    accumulate<E, W, HS, 1>(dk_acc, dpt, sq, kLd, lane);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(sds + (16 * warp + gid + 8 * h) * kLdP + 8 * j + 2 * tig) =
            pack2<E>(dpt[0][j][2 * h], dpt[0][j][2 * h + 1]);
    __syncthreads();  // dS^T complete

    // dQ = dS K for the tile's queries 16 warp .. 16 warp + 15, summed into dq.
    float dq_acc[HS / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      ldmatrix_x4_trans(a, at_rows(sds, kLdP, 16 * kk, 16 * warp, lane));
#pragma unroll
      for (int dd = 0; dd < HS / 16; ++dd) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, b_rows(sk, kLd, 16 * kk, 16 * dd, lane));
        mma_16816<W>(dq_acc[2 * dd], a, b[0], b[1]);
        mma_16816<W>(dq_acc[2 * dd + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t query = q0 + 16 * warp + gid + 8 * h;
      if (query >= g.tq) continue;
      float* row = dq.row<float>(bh, g.heads, query);
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        const int c = 8 * n + 2 * tig;
        const float x = dq_acc[n][2 * h] * scale, y = dq_acc[n][2 * h + 1] * scale;
        if (c + 1 < g.hs && reinterpret_cast<uintptr_t>(row) % 8 == 0) {
          atomic_add_pair(row + c, x, y);  // row + c is 8-byte aligned: c is even
        } else {
          if (c < g.hs) atomicAdd(row + c, x);
          if (c + 1 < g.hs) atomicAdd(row + c + 1, y);
        }
      }
    }
    bh = next_bh, q0 = next_q0;
  }
  cp_async_wait_all();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t key = key0 + 8 * h;
    if (key >= g.tk) continue;
    uint16_t* dk_row = dk.row<uint16_t>(bkv, g.kv_heads(), key);
    uint16_t* dv_row = dv.row<uint16_t>(bkv, g.kv_heads(), key);
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = 8 * n + 2 * tig + i;
        if (c >= g.hs) continue;
        E::store(dk_row, c, dk_acc[0][n][2 * h + i] * scale);
        E::store(dv_row, c, dv_acc[0][n][2 * h + i]);
      }
  }
}

// ---- launching (host) ----

// Bit i set where operand i (q, k, v, dO) can be loaded 16 bytes at a time: head size HS,
// and every head and row starting on 16 bytes.
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
