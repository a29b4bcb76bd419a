// The kernels of the CUDA backend that read indices: embedding and its backward,
// cross-entropy (its rows, their mean, its backward) and the fused classifier's. nn.cu launches them; they live in a
// header of their own so that tests/cuda/test_index_kernels_emulated.cpp can run them on
// the CPU under an emulation of CUDA. Values and logits are f32, bf16 or f16 (Floats);
// lse and the summed embedding gradient f32. Indices out of range are skipped and reported (Note
// [Deferred device errors]).
#pragma once

#include <cstdint>

#include "cuda/backend/bad_index.cuh"
#include "cuda/backend/launch.cuh"

namespace triad::cuda {

namespace {

// ---- embedding ----

__device__ inline int64_t index_at(const void* idx, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(idx)[i] : int64_t(static_cast<const int32_t*>(idx)[i]);
}

// The table (v, c) holds the rows [first, first + v) of the indices [0, vocab)
// (TableRows): an index there reads its row, any other valid one a row of zeros. A bad
// index (outside [0, vocab)) gives a zero row too (Note [Deferred device errors]).
__global__ void embedding_kernel(Floats w, const void* idx, bool is64, Floats out, int64_t n, int64_t c, int64_t v,
                                 int64_t first, int64_t vocab, BadIndexSink sink) {
  const int64_t total = n * c;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / c, j = t - i * c;
    const int64_t index = index_at(idx, is64, i), row = index - first;
    if (!(index >= 0 && index < vocab) && j == 0) record_bad_index(sink, IndexOp::embedding, index, i, n, vocab);
    out.store(t, index >= 0 && index < vocab && row >= 0 && row < v ? w.load(row * c + j) : 0.0f);
  }
}

// Only the table's rows take gradient; a bad index adds nothing.
__global__ void embedding_backward_kernel(Floats g, const void* idx, bool is64, float* gw, int64_t n, int64_t c,
                                          int64_t v, int64_t first, int64_t vocab, BadIndexSink sink) {
  const int64_t total = n * c;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / c, j = t - i * c;
    const int64_t index = index_at(idx, is64, i), row = index - first;
    if (!(index >= 0 && index < vocab)) {
      if (j == 0) record_bad_index(sink, IndexOp::embedding_backward, index, i, n, vocab);
    } else if (row >= 0 && row < v) {
      atomicAdd(gw + row * c + j, g.load(t));
    }
  }
}

// ---- cross-entropy ----

// Whether row r's target counts: not ignore_index and in range (a bad one is recorded
// once, by the caller's thread 0, and the row is then treated as ignored).
__device__ inline bool target_counts(int64_t t, int64_t r, int64_t rows, int64_t v, int64_t ignore_index, IndexOp op,
                                     BadIndexSink sink) {
  if (t == ignore_index) return false;
  const bool ok = t >= 0 && t < v;
  if (!ok && threadIdx.x == 0) record_bad_index(sink, op, t, r, rows, v);
  return ok;
}

// The log-sum-exp of the v logits from `row` on (-inf when v is 0), from one read of them:
// each thread keeps a running max and its sum of exponentials scaled to it, and the block
// combines them. Every thread of the block returns it.
__device__ inline float row_lse(Floats logits, int64_t row, int64_t v) {
  float m = -kInf, s = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float x = logits.load(row + j);
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else if (m != -kInf) {  // (a -inf logit before any finite one adds nothing)
      s += expf(x - m);
    }
  }
  const float mx = block_reduce(m, MaxFloat{}, -kInf);
  s = block_reduce(s > 0.0f ? s * expf(m - mx) : s, SumOp{}, 0.0f);
  return mx + logf(s);
}

// lse[r] and the row's loss (lse - logit of the target; 0 for a row that does not count)
// in double, over the first v of each row's w logits (the rest: padding).
__global__ void cross_entropy_kernel(Floats logits, const int64_t* targets, float* lse, double* loss, int64_t rows,
                                     int64_t v, int64_t w, int64_t ignore_index, BadIndexSink sink) {
  const int64_t r = blockIdx.x, row = r * w;
  const float l = row_lse(logits, row, v);
  if (threadIdx.x == 0) {
    lse[r] = l;
    const int64_t t = targets[r];
    const bool counts = target_counts(t, r, rows, v, ignore_index, IndexOp::cross_entropy, sink);
    loss[r] = counts ? double(l) - double(logits.load(row + t)) : 0.0;
  }
}

// One block: mean = (sum of the rows' losses) / count, count = the rows that count (0 and
// 0 when none do). Summed in a fixed order, so the loss is the same every run.
__global__ void cross_entropy_mean_kernel(const double* loss, const int64_t* targets, int64_t rows, int64_t v,
                                          int64_t ignore_index, float* mean, int64_t* count) {
  double sum = 0.0;
  long long n = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = targets[r];
    sum += loss[r];
    n += t != ignore_index && t >= 0 && t < v;
  }
  sum = block_reduce(sum, SumOp{}, 0.0);
  n = block_reduce(n, SumOp{}, 0ll);
  if (threadIdx.x == 0) {
    *mean = n ? float(sum / double(n)) : 0.0f;
    *count = n;
  }
}

// ---- the fused classifier (Note [Fused classifier] in autograd/fused_classifier.h) ----
// A chunk's logits hold the classes [first, first + v) of a vocabulary of `vocab` in the
// first v of each row's w columns (the rest: padding); targets are ids in [0, vocab).

// lse[r] over the row's v classes (-inf when v is 0) and the target's logit (0 when the
// target is not one of them or the row does not count).
__global__ void classifier_rows_kernel(Floats logits, const int64_t* targets, int64_t first, int64_t v, int64_t w,
                                       int64_t vocab, int64_t ignore_index, float* lse, float* target_logit,
                                       int64_t rows, BadIndexSink sink) {
  const int64_t r = blockIdx.x, row = r * w;
  const float l = row_lse(logits, row, v);
  if (threadIdx.x == 0) {
    lse[r] = l;
    const int64_t t = targets[r];
    const bool counts = target_counts(t, r, rows, vocab, ignore_index, IndexOp::cross_entropy, sink);
    target_logit[r] = counts && t >= first && t < first + v ? logits.load(row + t - first) : 0.0f;
  }
}

// One block: the mean of lse - target_logit over the rows that count, summed in double in a
// fixed order (the same every run), and their count.
__global__ void classifier_loss_kernel(const float* lse, const float* target_logit, const int64_t* targets,
                                       int64_t rows, int64_t vocab, int64_t ignore_index, float* mean, int64_t* count) {
  double sum = 0.0;
  long long n = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = targets[r];
    if (t == ignore_index || t < 0 || t >= vocab) continue;
    sum += double(lse[r]) - double(target_logit[r]);
    ++n;
  }
  sum = block_reduce(sum, SumOp{}, 0.0);
  n = block_reduce(n, SumOp{}, 0ll);
  if (threadIdx.x == 0) {
    *mean = n ? float(sum / double(n)) : 0.0f;
    *count = n;
  }
}

// The loss gradient of the loss over rows of logits: grad = (exp(logit - lse) - onehot(t -
// first)) * grad_loss / count over the v classes, zero in the padding columns and in rows
// that do not count; a target outside [first, first + v) (another rank's part of the
// vocabulary) puts no onehot here. grad may be logits (in place: each element is read and
// then written by one thread).
__global__ void classifier_grad_kernel(Floats logits, Floats grad, const int64_t* targets, int64_t first, int64_t v,
                                       int64_t w, int64_t vocab, int64_t ignore_index, const float* lse,
                                       const float* grad_loss, const int64_t* count, int64_t rows, BadIndexSink sink) {
  const int64_t r = blockIdx.x, row = r * w;
  const int64_t t = targets[r];
  if (!target_counts(t, r, rows, vocab, ignore_index, IndexOp::cross_entropy_backward, sink)) {
    for (int64_t j = threadIdx.x; j < w; j += blockDim.x) grad.store(row + j, 0.0f);
    return;
  }
  const float scale = *grad_loss / float(*count);
  const float l = lse[r];
  for (int64_t j = threadIdx.x; j < w; j += blockDim.x) {
    const float p = j < v ? expf(logits.load(row + j) - l) * scale : 0.0f;
    grad.store(row + j, j < v && j == t - first ? p - scale : p);
  }
}

}  // namespace

}  // namespace triad::cuda
