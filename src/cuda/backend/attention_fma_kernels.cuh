// The FMA attention kernels (attention.cu's header describes them), in a header of their
// own so that a CPU test can compile them against an emulation of the CUDA pieces they use
// (tests/cuda/test_attention_fma_emulated.cpp), as attention_mma_kernels.cuh does for the
// tensor-core ones.
#pragma once

#include <cstdint>

#include "cuda/backend/attention_common.cuh"

namespace triad::cuda {

namespace {

constexpr int kAttnThreads = 256;       // 16 row groups x 16 columns
constexpr int kTileStride = kTile + 1;  // a padded row of P / dS in shared memory

// Rows first .. first + kTile - 1 of a head into a padded shared tile (HS + 1 floats a row),
// zeros past `rows` and past hs.
template <class E, int HS>
__device__ void load_tile(float* dst, const typename E::type* src, int64_t stride_t, int64_t first, int64_t rows,
                          int hs) {
  for (int e = threadIdx.x; e < kTile * HS; e += blockDim.x) {
    const int r = e / HS, d = e % HS;
    const int64_t row = first + r;
    dst[r * (HS + 1) + d] = row < rows && d < hs ? E::load(src, row * stride_t + d) : 0.0f;
  }
}

// The reduction of v over the 16 lanes of a half-warp (a row group).
template <class Op>
__device__ float row_group_reduce(float v, Op op) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct MaxF {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// ---- forward ----

template <class E, int HS>
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(Operand q, Operand k, Operand v, Destination out, float* lse, Geometry g) {
  using T = typename E::type;
  constexpr int kStride = HS + 1, kCols = HS / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  float* const shared = reinterpret_cast<float*>(smem);
  float* sq = shared;                // (kTile, kStride) queries
  float* sk = sq + kTile * kStride;  // (kTile, kStride) keys
  float* sv = sk + kTile * kStride;  // (kTile, kStride) values
  float* sp = sv + kTile * kStride;  // (kTile, kTileStride) probabilities of the tile

  const int64_t bh = blockIdx.x;
  const int64_t q0 = int64_t(gridDim.y - 1 - blockIdx.y) * kTile;
  const int grp = threadIdx.x / 16, col = threadIdx.x % 16;
  const int64_t tk = g.keys(), offset = tk - g.tq;
  const T* kp = k.head<T>(g.kv_head(bh), g.kv_heads());
  const T* vp = v.head<T>(g.kv_head(bh), g.kv_heads());
  load_tile<E, HS>(sq, q.head<T>(bh, g.heads), q.stride_t, q0, g.tq, g.hs);

  float m[4], l[4], acc[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }
  // Keys seen by the tile's last real query, from the tile of the row's first key.
  const int64_t k_end = (q0 + kTile < g.tq ? q0 + kTile : g.tq) + offset, first_key = g.first_key(bh);
  for (int64_t k0 = (first_key < k_end ? first_key : k_end) / kTile * kTile; k0 < k_end; k0 += kTile) {
    __syncthreads();  // the previous tile's readers of sk, sv, sp are done
    load_tile<E, HS>(sk, kp, k.stride_t, k0, tk, g.hs);
    load_tile<E, HS>(sv, vp, v.stride_t, k0, tk, g.hs);
    __syncthreads();

    float s[4][4] = {};  // rows 4 grp + i, keys col + 16 j
#pragma unroll 8
    for (int d = 0; d < HS; ++d) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = sq[(4 * grp + i) * kStride + d];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = sk[(col + 16 * j) * kStride + d];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] = fmaf(a[i], b[j], s[i][j]);
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = q0 + 4 * grp + i;
      float mx = m[i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t key = k0 + col + 16 * j;
        s[i][j] = key >= first_key && key <= row + offset && key < tk ? s[i][j] * g.scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      mx = row_group_reduce(mx, MaxF{});
      // A row that has seen no key yet keeps max -inf; its terms are 0 (not exp2f(nan)).
      const float base = mx == -INFINITY ? 0.0f : mx;
      const float alpha = exp2f(m[i] - base);  // 0 on the row's first keys
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p = exp2f(s[i][j] - base);
        sum += p;
        sp[(4 * grp + i) * kTileStride + col + 16 * j] = p;
      }
      l[i] = l[i] * alpha + row_group_reduce(sum, SumOp{});
      m[i] = mx;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[i][c] *= alpha;
    }
    __syncthreads();  // the tile's P is complete

#pragma unroll 4
    for (int key = 0; key < kTile; ++key) {
      float p[4], vv[kCols];
#pragma unroll
      for (int i = 0; i < 4; ++i) p[i] = sp[(4 * grp + i) * kTileStride + key];
#pragma unroll
      for (int c = 0; c < kCols; ++c) vv[c] = sv[key * kStride + col + 16 * c];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[i][c] = fmaf(p[i], vv[c], acc[i][c]);
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = q0 + 4 * grp + i;
    if (row >= g.tq) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;  // 0: a query before its row's first key
    T* dst = out.row<T>(bh, g.heads, row);
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      if (col + 16 * c < g.hs) E::store(dst, col + 16 * c, acc[i][c] * inv);
    if (col == 0) lse[bh * g.tq + row] = l[i] > 0.0f ? (m[i] + log2f(l[i])) * kLn2 : INFINITY;
  }
}

// ---- backward ----

template <class E, int HS>
__global__ void __launch_bounds__(kAttnThreads)
    attention_backward_kernel(Operand q, Operand k, Operand v, Operand grad, const float* lse, const float* dsum,
                              Destination dq, Destination dk, Destination dv, float scale, Geometry g) {
  using T = typename E::type;
  constexpr int kStride = HS + 1, kCols = HS / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  float* const shared = reinterpret_cast<float*>(smem);
  float* sk = shared;                       // (kTile, kStride) keys of this block
  float* sv = sk + kTile * kStride;         // (kTile, kStride) values of this block
  float* sq = sv + kTile * kStride;         // (kTile, kStride) queries of the current tile
  float* sg = sq + kTile * kStride;         // (kTile, kStride) dO of the current tile
  float* sp = sg + kTile * kStride;         // (kTile, kTileStride) P, then dS
  float* s_lse = sp + kTile * kTileStride;  // (kTile) lse of the tile's rows, base 2
  float* s_d = s_lse + kTile;               // (kTile) D of the tile's rows

  const int64_t bkv = blockIdx.x;  // the key/value head (b NKV + j) whose key tile this block owns
  const int64_t k0 = int64_t(blockIdx.y) * kTile;
  const int grp = threadIdx.x / 16, col = threadIdx.x % 16;
  const int64_t offset = g.tk - g.tq, first_key = g.first_key(g.query_head(bkv, 0));
  load_tile<E, HS>(sk, k.head<T>(bkv, g.kv_heads()), k.stride_t, k0, g.tk, g.hs);
  load_tile<E, HS>(sv, v.head<T>(bkv, g.kv_heads()), v.stride_t, k0, g.tk, g.hs);

  float dk_acc[4][kCols] = {}, dv_acc[4][kCols] = {};  // keys k0 + 4 grp + i, columns col + 16 c
  // The first query tile with a row that sees key k0: rows i >= k0 - offset.
  const int64_t first = (k0 > offset ? k0 - offset : 0) / kTile * kTile;
  for (int member = 0; member < g.group; ++member) {  // the query heads that read this key/value head
    const int64_t bh = g.query_head(bkv, member);
    const T* qp = q.head<T>(bh, g.heads);
    const T* gp = grad.head<T>(bh, g.heads);
    for (int64_t q0 = first; q0 < g.tq; q0 += kTile) {
      __syncthreads();  // the previous tile's readers of sq, sg, sp, s_lse, s_d are done
      load_tile<E, HS>(sq, qp, q.stride_t, q0, g.tq, g.hs);
      load_tile<E, HS>(sg, gp, grad.stride_t, q0, g.tq, g.hs);
      for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
        const bool real = q0 + r < g.tq;
        s_lse[r] = real ? lse[bh * g.tq + q0 + r] * kLog2e : 0.0f;
        s_d[r] = real ? dsum[bh * g.tq + q0 + r] : 0.0f;
      }
      __syncthreads();

      // S and dP, rows (queries) 4 grp + i, keys col + 16 j.
      float p[4][4] = {}, ds[4][4] = {};
#pragma unroll 4
      for (int d = 0; d < HS; ++d) {
        float a[4], ga[4], b[4], vb[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          a[i] = sq[(4 * grp + i) * kStride + d];
          ga[i] = sg[(4 * grp + i) * kStride + d];
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          b[j] = sk[(col + 16 * j) * kStride + d];
          vb[j] = sv[(col + 16 * j) * kStride + d];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            p[i][j] = fmaf(a[i], b[j], p[i][j]);
            ds[i][j] = fmaf(ga[i], vb[j], ds[i][j]);
          }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = q0 + 4 * grp + i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t key = k0 + col + 16 * j;
          const bool seen = row < g.tq && key < g.tk && key <= row + offset && key >= first_key;
          p[i][j] = seen ? exp2f(p[i][j] * g.scale_log2 - s_lse[4 * grp + i]) : 0.0f;
          ds[i][j] = p[i][j] * (ds[i][j] - s_d[4 * grp + i]);
          sp[(4 * grp + i) * kTileStride + col + 16 * j] = p[i][j];
        }
      }
      __syncthreads();  // P complete

      // dV += P^T dO: here rows 4 grp + i are keys.
#pragma unroll 4
      for (int r = 0; r < kTile; ++r) {
        float pk[4], gv[kCols];
#pragma unroll
        for (int i = 0; i < 4; ++i) pk[i] = sp[r * kTileStride + 4 * grp + i];
#pragma unroll
        for (int c = 0; c < kCols; ++c) gv[c] = sg[r * kStride + col + 16 * c];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int c = 0; c < kCols; ++c) dv_acc[i][c] = fmaf(pk[i], gv[c], dv_acc[i][c]);
      }
      __syncthreads();  // P's readers are done
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) sp[(4 * grp + i) * kTileStride + col + 16 * j] = ds[i][j];
      __syncthreads();  // dS complete

      // dK += dS^T Q (scaled at the end); rows 4 grp + i are keys.
#pragma unroll 4
      for (int r = 0; r < kTile; ++r) {
        float dsk[4], qv[kCols];
#pragma unroll
        for (int i = 0; i < 4; ++i) dsk[i] = sp[r * kTileStride + 4 * grp + i];
#pragma unroll
        for (int c = 0; c < kCols; ++c) qv[c] = sq[r * kStride + col + 16 * c];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int c = 0; c < kCols; ++c) dk_acc[i][c] = fmaf(dsk[i], qv[c], dk_acc[i][c]);
      }

      // dQ += scale dS K; rows 4 grp + i are queries.
      float dq_acc[4][kCols] = {};
#pragma unroll 4
      for (int key = 0; key < kTile; ++key) {
        float dsq[4], kv[kCols];
#pragma unroll
        for (int i = 0; i < 4; ++i) dsq[i] = sp[(4 * grp + i) * kTileStride + key];
#pragma unroll
        for (int c = 0; c < kCols; ++c) kv[c] = sk[key * kStride + col + 16 * c];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int c = 0; c < kCols; ++c) dq_acc[i][c] = fmaf(dsq[i], kv[c], dq_acc[i][c]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = q0 + 4 * grp + i;
        if (row >= g.tq) continue;
        float* dq_row = dq.row<float>(bh, g.heads, row);
#pragma unroll
        for (int c = 0; c < kCols; ++c)
          if (col + 16 * c < g.hs) atomicAdd(dq_row + col + 16 * c, dq_acc[i][c] * scale);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t key = k0 + 4 * grp + i;
    if (key >= g.tk) continue;
    T* dk_row = dk.row<T>(bkv, g.kv_heads(), key);
    T* dv_row = dv.row<T>(bkv, g.kv_heads(), key);
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      if (col + 16 * c < g.hs) {
        E::store(dk_row, col + 16 * c, dk_acc[i][c] * scale);
        E::store(dv_row, col + 16 * c, dv_acc[i][c]);
      }
  }
}

// ---- shared memory ----

template <int HS>
constexpr size_t forward_smem() {
  return sizeof(float) * (3 * kTile * (HS + 1) + kTile * kTileStride);
}
template <int HS>
constexpr size_t backward_smem() {
  return sizeof(float) * (4 * kTile * (HS + 1) + kTile * kTileStride + 2 * kTile);
}

}  // namespace

}  // namespace triad::cuda
