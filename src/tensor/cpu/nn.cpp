// Fused neural-network kernels: softmax (optionally causal), layer norm, RMS norm (each
// also after a residual add, and adding the residual's gradient in its backward),
// embedding, cross-entropy. One row per loop iteration, rows spread over threads; reductions that
// cross rows (norm weight gradients, embedding scatter) are split by column so every
// thread owns what it writes and results do not depend on the schedule. bf16/f16 operands
// go through f32 copies (tensor/cpu/widen.h); the embedding copies rows as stored.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"
#include "tensor/cpu/vec_math.h"
#include "tensor/cpu/visit_float.h"
#include "tensor/cpu/widen.h"

namespace triad {

namespace {

int64_t index_at(const Tensor& idx, int64_t i) {
  return idx.dtype() == DType::i64 ? idx.data<int64_t>()[i] : idx.data<int32_t>()[i];
}

template <class T>
inline void layer_norm_row(const T* in, const T* w, const T* b, T eps, int64_t c, T* out, T& mean, T& rstd) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < c; ++j) s += in[j];
  const T mu = s / T(c);
  T v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t j = 0; j < c; ++j) v += (in[j] - mu) * (in[j] - mu);
  const T rs = T(1) / std::sqrt(v / T(c) + eps);
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) out[j] = (in[j] - mu) * rs * w[j] + b[j];
  mean = mu;
  rstd = rs;
}

template <class T>
inline void rms_norm_row(const T* in, const T* w, T eps, int64_t c, T* out, T& rstd) {
  T ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < c; ++j) ss += in[j] * in[j];
  const T rs = T(1) / std::sqrt(ss / T(c) + eps);
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) out[j] = in[j] * rs * w[j];
  rstd = rs;
}

// dx += the residual's gradient, row by row after dx is complete (kept out of dx's own
// expression, so dx rounds as the unfused backward's does before the add).
template <class T>
inline void add_row(T* dx, const T* residual, int64_t c) {
  if (!residual) return;
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) dx[j] += residual[j];
}

// The loss gradient of rows of logits: (softmax(in) - onehot(target - first)) * sc into out
// (may be in), sc = grad_loss / count (0 when nothing counts), zero for an ignored row and
// past the first v columns (padding); a target outside [first, first + v) (another rank's
// part of the vocabulary) puts no -sc here.
template <class T>
void softmax_grad_rows(const T* in, T* out, int64_t rows, int64_t w, int64_t v, const int64_t* targets, int64_t first,
                       int64_t ignore_index, const T* lse, const Tensor& grad_loss, const Tensor& count) {
  const int64_t counted = count.data<int64_t>()[0];
  const T sc = T(counted ? double(grad_loss.data<T>()[0]) / double(counted) : 0.0);
#pragma omp parallel for if (rows * w > cpu::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    T* g = out + r * w;
    if (targets[r] == ignore_index) {
      std::fill(g, g + w, T(0));
      continue;
    }
    const T* row = in + r * w;
    const T l = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < v; ++j) g[j] = cpu::vexp(row[j] - l) * sc;
    std::fill(g + v, g + w, T(0));  // padding
    const int64_t j = targets[r] - first;
    if (j >= 0 && j < v) g[j] -= sc;
  }
}

}  // namespace

void CpuBackend::softmax(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool causal, int64_t tq) {
  if (cpu::any_16bit({&x, &y})) {
    const cpu::WideOut o(y);
    softmax(cpu::widen(x), o.get(), rows, n, causal, tq);
    return o.store();
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for if (rows * n > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = px + r * n;
      T* out = py + r * n;
      const int64_t valid = causal ? (r % tq) + (n - tq) + 1 : n;
      T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, in[j]);
      T total = 0;
#pragma omp simd reduction(+ : total)
      for (int64_t j = 0; j < valid; ++j) {
        out[j] = cpu::vexp(in[j] - mx);
        total += out[j];
      }
      const T inv = T(1) / total;
#pragma omp simd
      for (int64_t j = 0; j < valid; ++j) out[j] *= inv;
      std::fill(out + valid, out + n, T(0));
    }
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, int64_t rows,
                                  int64_t n) {
  if (cpu::any_16bit({&y, &grad_y, &grad_x})) {
    const cpu::WideOut o(grad_x);
    softmax_backward(cpu::widen(y), cpu::widen(grad_y), o.get(), rows, n);
    return o.store();
  }
  cpu::visit_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* py = y.data<T>();
    const T* pg = grad_y.data<T>();
    T* pd = grad_x.data<T>();
#pragma omp parallel for if (rows * n > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* yr = py + r * n;
      const T* gr = pg + r * n;
      T* dr = pd + r * n;
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < n; ++j) dot += yr[j] * gr[j];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - dot);
    }
  });
}

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd) {
  if (cpu::any_16bit({&x, &weight, &bias, &y})) {
    const cpu::WideOut o(y);
    layer_norm(cpu::widen(x), cpu::widen(weight), cpu::widen(bias), eps, o.get(), mean, rstd);
    return o.store();
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t c = x.size(-1), rows = mean.numel();
    const T *px = x.data<T>(), *pw = weight.data<T>(), *pb = bias.data<T>();
    T *py = y.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) layer_norm_row(px + r * c, pw, pb, T(eps), c, py + r * c, pm[r], pr[r]);
  });
}

// A 16-bit sum is rounded before the norm reads it: the add and the norm run as the
// unfused ops do, on f32 copies.
void CpuBackend::add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                                const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  if (cpu::any_16bit({&x, &r, &weight, &bias, &sum, &y})) {
    binary(BinaryOp::add, x, r, sum);
    return layer_norm(sum, weight, bias, eps, y, mean, rstd);
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t c = x.size(-1), rows = mean.numel();
    const T *px = x.data<T>(), *pr = r.data<T>(), *pw = weight.data<T>(), *pb = bias.data<T>();
    T *ps = sum.data<T>(), *py = y.data<T>(), *pm = mean.data<T>(), *prs = rstd.data<T>();
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t i = 0; i < rows; ++i) {
      T* s = ps + i * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) s[j] = px[i * c + j] + pr[i * c + j];
      layer_norm_row(s, pw, pb, T(eps), c, py + i * c, pm[i], prs[i]);
    }
  });
}

void CpuBackend::layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& grad_residual) {
  if (cpu::any_16bit({&grad_y, &x, &weight, &dx, &dweight, &grad_residual})) {
    const cpu::WideOut odx(dx), odw(dweight), odb(dbias);
    layer_norm_backward(cpu::widen(grad_y), cpu::widen(x), cpu::widen(weight), mean, rstd, odx.get(), odw.get(),
                        odb.get(), cpu::widen(grad_residual));
    odx.store();
    odw.store();
    return odb.store();
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t c = x.size(-1), rows = mean.numel();
    const T *pg = grad_y.data<T>(), *px = x.data<T>(), *pw = weight.data<T>();
    const T *pm = mean.data<T>(), *pr = rstd.data<T>();
    T *pdx = dx.data<T>(), *pdw = dweight.data<T>(), *pdb = dbias.data<T>();
    const T* pres = grad_residual.defined() ? grad_residual.data<T>() : nullptr;
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T *g = pg + r * c, *in = px + r * c;
      const T mu = pm[r], rs = pr[r];
      T sum_g = 0, sum_gx = 0;  // mean of (g w) and of (g w xhat), times c
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t j = 0; j < c; ++j) {
        const T gw = g[j] * pw[j];
        sum_g += gw;
        sum_gx += gw * (in[j] - mu) * rs;
      }
      const T a = sum_g / T(c), b = sum_gx / T(c);
      T* out = pdx + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) out[j] = rs * (g[j] * pw[j] - a - (in[j] - mu) * rs * b);
      add_row(out, pres ? pres + r * c : nullptr, c);
    }
    // Parameter gradients: columns split across threads, rows summed in order.
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t j = 0; j < c; ++j) {
      T sw = 0, sb = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const T g = pg[r * c + j];
        sw += g * (px[r * c + j] - pm[r]) * pr[r];
        sb += g;
      }
      pdw[j] = sw;
      pdb[j] = sb;
    }
  });
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  if (cpu::any_16bit({&x, &weight, &y})) {
    const cpu::WideOut o(y);
    rms_norm(cpu::widen(x), cpu::widen(weight), eps, o.get(), rstd);
    return o.store();
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t c = x.size(-1), rows = rstd.numel();
    const T *px = x.data<T>(), *pw = weight.data<T>();
    T *py = y.data<T>(), *pr = rstd.data<T>();
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) rms_norm_row(px + r * c, pw, T(eps), c, py + r * c, pr[r]);
  });
}

void CpuBackend::add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps, const Tensor& sum,
                              const Tensor& y, const Tensor& rstd) {
  if (cpu::any_16bit({&x, &r, &weight, &sum, &y})) {
    binary(BinaryOp::add, x, r, sum);
    return rms_norm(sum, weight, eps, y, rstd);
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t c = x.size(-1), rows = rstd.numel();
    const T *px = x.data<T>(), *pr = r.data<T>(), *pw = weight.data<T>();
    T *ps = sum.data<T>(), *py = y.data<T>(), *prs = rstd.data<T>();
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t i = 0; i < rows; ++i) {
      T* s = ps + i * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) s[j] = px[i * c + j] + pr[i * c + j];
      rms_norm_row(s, pw, T(eps), c, py + i * c, prs[i]);
    }
  });
}

void CpuBackend::rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                   const Tensor& dx, const Tensor& dweight, const Tensor& grad_residual) {
  if (cpu::any_16bit({&grad_y, &x, &weight, &dx, &dweight, &grad_residual})) {
    const cpu::WideOut odx(dx), odw(dweight);
    rms_norm_backward(cpu::widen(grad_y), cpu::widen(x), cpu::widen(weight), rstd, odx.get(), odw.get(),
                      cpu::widen(grad_residual));
    odx.store();
    return odw.store();
  }
  cpu::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t c = x.size(-1), rows = rstd.numel();
    const T *pg = grad_y.data<T>(), *px = x.data<T>(), *pw = weight.data<T>(), *pr = rstd.data<T>();
    T *pdx = dx.data<T>(), *pdw = dweight.data<T>();
    const T* pres = grad_residual.defined() ? grad_residual.data<T>() : nullptr;
    // x^ = x rstd, y = x^ w: dx = rstd (g w - x^ mean(g w x^)), dweight = the sum over rows of g x^.
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T *g = pg + r * c, *in = px + r * c;
      const T rs = pr[r];
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < c; ++j) dot += g[j] * pw[j] * in[j] * rs;
      const T m = dot / T(c);
      T* out = pdx + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) out[j] = rs * (g[j] * pw[j] - in[j] * rs * m);
      add_row(out, pres ? pres + r * c : nullptr, c);
    }
#pragma omp parallel for if (rows * c > cpu::kParallelGrain)
    for (int64_t j = 0; j < c; ++j) {
      T sw = 0;
      for (int64_t r = 0; r < rows; ++r) sw += pg[r * c + j] * px[r * c + j] * pr[r];
      pdw[j] = sw;
    }
  });
}

void CpuBackend::embedding(const Tensor& weight, const Tensor& indices, const Tensor& out, TableRows rows) {
  // Rows copied as stored: any floating dtype, out of weight's. The op checked the indices
  // (in [0, rows.vocab)): one off the table's rows reads zeros.
  const int64_t v = weight.size(0), c = weight.size(1), n = indices.numel();
  const size_t row_bytes = size_t(c) * element_size(weight.dtype());
  const auto* pw = static_cast<const unsigned char*>(weight.raw_data());
  auto* po = static_cast<unsigned char*>(out.raw_data());
#pragma omp parallel for if (n * c > cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = index_at(indices, i) - rows.first;
    if (row >= 0 && row < v)
      std::memcpy(po + i * row_bytes, pw + row * row_bytes, row_bytes);
    else
      std::memset(po + i * row_bytes, 0, row_bytes);  // all-zero bits: +0 in every floating dtype
  }
}

void CpuBackend::embedding_backward(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_weight,
                                    TableRows rows) {
  if (cpu::any_16bit({&grad_y, &grad_weight})) {
    const cpu::WideOut o(grad_weight, /*initial=*/true);
    embedding_backward(cpu::widen(grad_y), indices, o.get(), rows);
    return o.store();
  }
  cpu::visit_float(grad_y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t v = grad_weight.size(0), c = grad_weight.size(1), n = indices.numel();
    const T* pg = grad_y.data<T>();
    T* pw = grad_weight.data<T>();
    // Each thread owns a band of columns, so rows hit by several indices need no atomics.
#pragma omp parallel if (n * c > cpu::kParallelGrain)
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = c * t / nt, hi = c * (t + 1) / nt;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = index_at(indices, i) - rows.first;
        if (row < 0 || row >= v) continue;  // a row of zeros, off the table
        T* dst = pw + row * c;
        const T* src = pg + i * c;
#pragma omp simd
        for (int64_t j = lo; j < hi; ++j) dst[j] += src[j];
      }
    }
  });
}

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& loss,
                               const Tensor& count, int64_t ignore_index, int64_t classes) {
  if (cpu::is_16bit(logits)) return cross_entropy(cpu::widen(logits), targets, lse, loss, count, ignore_index, classes);
  cpu::visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = logits.size(0), w = logits.size(1), v = classes;
    const T* pl = logits.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T* ps = lse.data<T>();
    double sum = 0;
    int64_t counted = 0;
#pragma omp parallel for reduction(+ : sum, counted) if (rows * v > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = pl + r * w;
      T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < v; ++j) mx = std::max(mx, row[j]);
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < v; ++j) s += cpu::vexp(row[j] - mx);
      ps[r] = mx + std::log(s);
      if (pt[r] == ignore_index) continue;
      sum += double(ps[r]) - double(row[pt[r]]);
      ++counted;
    }
    loss.data<T>()[0] = T(counted ? sum / double(counted) : 0.0);
    count.data<int64_t>()[0] = counted;
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                        const Tensor& grad_loss, const Tensor& count, int64_t ignore_index,
                                        int64_t classes, const Tensor& grad_logits) {
  if (cpu::any_16bit({&logits, &grad_logits})) {
    const cpu::WideOut o(grad_logits);
    cross_entropy_backward(cpu::widen(logits), targets, lse, grad_loss, count, ignore_index, classes, o.get());
    return o.store();
  }
  cpu::visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_grad_rows(logits.data<T>(), grad_logits.data<T>(), logits.size(0), logits.size(1), classes,
                      targets.data<int64_t>(), 0, ignore_index, lse.data<T>(), grad_loss, count);
  });
}

void CpuBackend::classifier_rows(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes,
                                 int64_t vocab, int64_t ignore_index, const Tensor& lse, const Tensor& target_logit) {
  if (cpu::is_16bit(logits))
    return classifier_rows(cpu::widen(logits), targets, first, classes, vocab, ignore_index, lse, target_logit);
  cpu::visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = logits.size(0), w = logits.size(1), v = classes;
    const T* pl = logits.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T *ps = lse.data<T>(), *pz = target_logit.data<T>();
#pragma omp parallel for if (rows * v > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = pl + r * w;
      T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < v; ++j) mx = std::max(mx, row[j]);
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < v; ++j) s += cpu::vexp(row[j] - mx);
      ps[r] = v ? mx + std::log(s) : mx;
      const int64_t j = pt[r] - first;
      pz[r] = pt[r] != ignore_index && j >= 0 && j < v ? row[j] : T(0);
    }
  });
}

void CpuBackend::classifier_loss(const Tensor& lse, const Tensor& target_logit, const Tensor& targets, int64_t,
                                 int64_t ignore_index, const Tensor& loss, const Tensor& count) {
  cpu::visit_float(lse.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *ps = lse.data<T>(), *pz = target_logit.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    double sum = 0;
    int64_t counted = 0;
    for (int64_t r = 0; r < lse.numel(); ++r) {
      if (pt[r] == ignore_index) continue;
      sum += double(ps[r]) - double(pz[r]);
      ++counted;
    }
    loss.data<T>()[0] = T(counted ? sum / double(counted) : 0.0);
    count.data<int64_t>()[0] = counted;
  });
}

void CpuBackend::classifier_grad(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t,
                                 int64_t ignore_index, const Tensor& lse, const Tensor& grad_loss,
                                 const Tensor& count) {
  if (cpu::is_16bit(logits)) {
    const cpu::WideOut o(logits, /*initial=*/true);
    classifier_grad(o.get(), targets, first, classes, 0, ignore_index, lse, grad_loss, count);
    return o.store();
  }
  cpu::visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_grad_rows(logits.data<T>(), logits.data<T>(), logits.size(0), logits.size(1), classes,
                      targets.data<int64_t>(), first, ignore_index, lse.data<T>(), grad_loss, count);
  });
}

}  // namespace triad
