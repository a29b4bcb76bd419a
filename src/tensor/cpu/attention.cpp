// Fused causal attention on the CPU (Backend::attention and attention_backward), flash-
// attention style: per (batch, head), queries in blocks of kBlockQ rows meet keys in blocks
// of kBlockK; each block of scores is one Eigen GEMM and lives only in a thread's scratch,
// so memory grows with T hs, not T^2, and blocks wholly above the causal diagonal are never
// computed.
// - Forward: an online softmax per query row (running max m and sum l of exp(s - m); the
//   accumulated output is rescaled by exp(m_old - m_new) when the max grows), then
//   out = acc / l and lse = m + log l. Tasks are (batch, head, query block), the heaviest
//   (last) query blocks of a head handed out first.
// - Backward: per (batch, key/value head), for each query head that reads it in turn (one
//   under multi-head attention, the group under grouped-query attention) D = rowsum(dO o
//   O), then for every block pair the probabilities are recomputed from lse,
//   P = exp(s - lse), and dV += P^T dO, dS = P o (dO V^T - D), dQ += scale dS K,
//   dK += scale dS^T Q. One thread owns a (batch, key/value head), so its dK, dV and its
//   query heads' dQ need no synchronization and results do not depend on the schedule.
// bf16/f16 tensors are widened to f32 on entry and results narrowed on exit (the CPU
// computes in f32 and f64 only).
// With key_start (Note [Left-padded batches] in nn/language_model.h) row b's queries see keys
// j >= key_start[b] only: key blocks wholly before it are skipped, the rest masked; a query
// that sees no key outputs 0 with lse = +inf, so the backward gives it and through it
// nothing. With cached (ops::causal_attention) k and v are narrowed to the keys that count.
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/vec_math.h"
#include "tensor/cpu/visit_float.h"
#include "tensor/ops.h"

namespace triad {

namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 64;

template <class T>
using Rows = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using RowsMap = Eigen::Map<Rows<T>, 0, Eigen::OuterStride<>>;

// One (batch, head) of a (B, NH, T, hs) tensor whose hs dimension has stride 1, as
// row-major (rows, hs) matrices.
template <class T>
struct Heads {
  T* base;
  int64_t stride_b, stride_h, stride_t, heads, hs;
  explicit Heads(const Tensor& t)
      : base(static_cast<T*>(t.raw_data())),
        stride_b(t.stride(0)),
        stride_h(t.stride(1)),
        stride_t(t.stride(2)),
        heads(t.size(1)),
        hs(t.size(3)) {}
  // Rows first .. first + count - 1 of head bh (= b NH + h).
  RowsMap<T> rows(int64_t bh, int64_t first, int64_t count) const {
    T* p = base + (bh / heads) * stride_b + (bh % heads) * stride_h + first * stride_t;
    return RowsMap<T>(p, count, hs, Eigen::OuterStride<>(stride_t));
  }
};

// The key/value head that query head bh (= b NH + h) reads: b NKV + h / group, group = NH / NKV.
inline int64_t kv_head(int64_t bh, int64_t nh, int64_t group) { return bh / nh * (nh / group) + bh % nh / group; }

// Keys of a block starting at key k0 (of nk) that query i sees: j <= i + offset.
inline int64_t keys_seen(int64_t i, int64_t offset, int64_t k0, int64_t nk) {
  return std::clamp<int64_t>(i + offset + 1 - k0, 0, nk);
}

// The first key of the block starting at k0 (of nk) that row b's queries see: j >= first[b].
inline int64_t first_seen(const int64_t* first, int64_t b, int64_t k0, int64_t nk) {
  return first ? std::clamp<int64_t>(first[b] - k0, 0, nk) : 0;
}

// key_start as i64 values on the host, or nullptr when absent (every key from 0 is seen).
const int64_t* key_starts(const Tensor& key_start) { return key_start.defined() ? key_start.data<int64_t>() : nullptr; }

// Work below which a call stays on one thread (multiply-adds of the scores).
bool worth_threads(const Tensor& q, const Tensor& k) {
  return q.size(0) * q.size(1) * q.size(2) * k.size(2) * q.size(3) > (int64_t(1) << 18);
}

template <class T>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, T scale,
             const int64_t* first) {
  const int64_t tq = q.size(2), tk = k.size(2), hs = q.size(3), offset = tk - tq, nh = q.size(1);
  const int64_t heads = q.size(0) * q.size(1), q_blocks = (tq + kBlockQ - 1) / kBlockQ, group = nh / k.size(1);
  const Heads<T> Q(q), K(k), V(v), O(out);
  T* pl = lse.data<T>();
  constexpr T kInf = std::numeric_limits<T>::infinity();
#pragma omp parallel if (worth_threads(q, k))
  {
    Rows<T> s(kBlockQ, kBlockK), acc(kBlockQ, hs);
    std::vector<T> m(kBlockQ), l(kBlockQ);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < heads * q_blocks; ++task) {
      const int64_t bh = task / q_blocks, q0 = (q_blocks - 1 - task % q_blocks) * kBlockQ;
      const int64_t kv = kv_head(bh, nh, group);
      const int64_t nq = std::min(kBlockQ, tq - q0), k_end = q0 + nq + offset;
      const RowsMap<T> qb = Q.rows(bh, q0, nq);
      acc.topRows(nq).setZero();
      std::fill_n(m.begin(), nq, -kInf);
      std::fill_n(l.begin(), nq, T(0));
      const int64_t b = bh / nh, k_begin = first ? std::min(first[b], k_end) / kBlockK * kBlockK : 0;
      for (int64_t k0 = k_begin; k0 < k_end; k0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, k_end - k0), lo = first_seen(first, b, k0, nk);
        auto sb = s.topLeftCorner(nq, nk);
        sb.noalias() = qb * K.rows(kv, k0, nk).transpose();
        for (int64_t r = 0; r < nq; ++r) {
          T* row = s.data() + r * kBlockK;
          const int64_t seen = keys_seen(q0 + r, offset, k0, nk);
          T mx = m[r];
#pragma omp simd reduction(max : mx)
          for (int64_t j = lo; j < seen; ++j) {
            row[j] *= scale;
            mx = std::max(mx, row[j]);
          }
          T total = 0;
#pragma omp simd reduction(+ : total)
          for (int64_t j = lo; j < seen; ++j) {
            row[j] = cpu::vexp(row[j] - mx);
            total += row[j];
          }
          std::fill(row, row + std::min(lo, nk), T(0));
          std::fill(row + std::max(seen, lo), row + nk, T(0));
          // When the running max grew, what was summed under the old one is rescaled.
          if (mx != m[r]) {
            const T alpha = std::exp(m[r] - mx);  // 0 on a row's first keys (m = -inf)
            l[r] *= alpha;
            acc.row(r) *= alpha;
            m[r] = mx;
          }
          l[r] += total;
        }
        acc.topRows(nq).noalias() += sb * V.rows(kv, k0, nk);
      }
      RowsMap<T> ob = O.rows(bh, q0, nq);
      for (int64_t r = 0; r < nq; ++r) {
        if (l[r] > 0) {
          ob.row(r) = acc.row(r) / l[r];
          pl[bh * tq + q0 + r] = m[r] + std::log(l[r]);
        } else {  // a query before its row's first key
          ob.row(r).setZero();
          pl[bh * tq + q0 + r] = kInf;
        }
      }
    }
  }
}

template <class T>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Tensor& grad_out, const Tensor& dq, const Tensor& dk, const Tensor& dv, T scale,
              const int64_t* first) {
  const int64_t tq = q.size(2), tk = k.size(2), offset = tk - tq, nh = q.size(1), nkv = k.size(1);
  const int64_t kv_heads = k.size(0) * nkv, group = nh / nkv;
  const Heads<T> Q(q), K(k), V(v), O(out), dO(grad_out), dQ(dq), dK(dk), dV(dv);
  const T* pl = lse.data<T>();
#pragma omp parallel if (worth_threads(q, k))
  {
    Rows<T> p(kBlockQ, kBlockK), ds(kBlockQ, kBlockK);
    std::vector<T> d(static_cast<size_t>(tq));  // D of every query of the head
#pragma omp for schedule(dynamic)
    for (int64_t kv = 0; kv < kv_heads; ++kv) {
      dK.rows(kv, 0, tk).setZero();
      dV.rows(kv, 0, tk).setZero();
      const int64_t b = kv / nkv, first_head = b * nh + kv % nkv * group;
      // The query heads that read key/value head kv (= b NKV + j), in turn: b NH + j group + r.
      for (int64_t bh = first_head; bh < first_head + group; ++bh) {
        dQ.rows(bh, 0, tq).setZero();
        const RowsMap<T> o = O.rows(bh, 0, tq), g = dO.rows(bh, 0, tq);
        for (int64_t i = 0; i < tq; ++i) d[size_t(i)] = o.row(i).dot(g.row(i));
        const T* row_lse = pl + bh * tq;
        for (int64_t q0 = 0; q0 < tq; q0 += kBlockQ) {
          const int64_t nq = std::min(kBlockQ, tq - q0), k_end = q0 + nq + offset;
          const RowsMap<T> qb = Q.rows(bh, q0, nq), gb = dO.rows(bh, q0, nq);
          RowsMap<T> dqb = dQ.rows(bh, q0, nq);
          const int64_t k_begin = first ? std::min(first[b], k_end) / kBlockK * kBlockK : 0;
          for (int64_t k0 = k_begin; k0 < k_end; k0 += kBlockK) {
            const int64_t nk = std::min(kBlockK, k_end - k0), lo = first_seen(first, b, k0, nk);
            const RowsMap<T> kb = K.rows(kv, k0, nk), vb = V.rows(kv, k0, nk);
            auto pb = p.topLeftCorner(nq, nk);
            auto dsb = ds.topLeftCorner(nq, nk);
            pb.noalias() = qb * kb.transpose();
            dsb.noalias() = gb * vb.transpose();  // dP
            for (int64_t r = 0; r < nq; ++r) {
              T* pr = p.data() + r * kBlockK;
              T* dr = ds.data() + r * kBlockK;
              const int64_t seen = keys_seen(q0 + r, offset, k0, nk);
              const T lr = row_lse[q0 + r], dr_sum = d[size_t(q0 + r)];
#pragma omp simd
              for (int64_t j = lo; j < seen; ++j) {
                pr[j] = cpu::vexp(pr[j] * scale - lr);
                dr[j] = pr[j] * (dr[j] - dr_sum) * scale;
              }
              std::fill(pr, pr + std::min(lo, nk), T(0));
              std::fill(dr, dr + std::min(lo, nk), T(0));
              std::fill(pr + std::max(seen, lo), pr + nk, T(0));
              std::fill(dr + std::max(seen, lo), dr + nk, T(0));
            }
            dV.rows(kv, k0, nk).noalias() += pb.transpose() * gb;
            dqb.noalias() += dsb * kb;
            dK.rows(kv, k0, nk).noalias() += dsb.transpose() * qb;
          }
        }
      }
    }
  }
}

// t as a new contiguous f32 tensor.
Tensor widened(Backend& backend, const Tensor& t) {
  Tensor w = Tensor::empty(t.shape(), DType::f32);
  backend.copy(w, t);
  return w;
}

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                           double scale, const Tensor& key_start, const Tensor& cached) {
  if (cached.defined()) {  // the keys that count, as a narrower k and v
    const int64_t keys = cached.data<int64_t>()[0] + q.size(2);
    TRIAD_CHECK(keys >= q.size(2) && keys <= k.size(2), "causal_attention: " << keys - q.size(2) << " cached keys and "
                                                        << q.size(2) << " queries exceed the " << k.size(2) << " keys");
    attention(q, ops::narrow(k, 2, 0, keys), ops::narrow(v, 2, 0, keys), out, lse, scale, key_start);
    return;
  }
  if (is_16bit(q.dtype())) {
    const Tensor o = Tensor::empty(out.shape(), DType::f32);
    attention(widened(*this, q), widened(*this, k), widened(*this, v), o, lse, scale, key_start);
    copy(out, o);
    return;
  }
  cpu::visit_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward<T>(q, k, v, out, lse, T(scale), key_starts(key_start));
  });
}

void CpuBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, const Tensor& grad_out, const Tensor& dq, const Tensor& dk,
                                    const Tensor& dv, double scale, const Tensor& key_start) {
  if (is_16bit(q.dtype())) {
    const Tensor gq = Tensor::empty(dq.shape(), DType::f32), gk = Tensor::empty(dk.shape(), DType::f32),
                 gv = Tensor::empty(dv.shape(), DType::f32);
    attention_backward(widened(*this, q), widened(*this, k), widened(*this, v), widened(*this, out), lse,
                       widened(*this, grad_out), gq, gk, gv, scale, key_start);
    copy(dq, gq);
    copy(dk, gk);
    copy(dv, gv);
    return;
  }
  cpu::visit_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward<T>(q, k, v, out, lse, grad_out, dq, dk, dv, T(scale), key_starts(key_start));
  });
}

}  // namespace triad
