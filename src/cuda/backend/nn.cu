// Fused neural-network kernels: softmax (optionally causal) and its backward, layer norm
// and its backward, embedding and its backward, cross-entropy and its backward
// (tensor/cpu/nn.cpp on the GPU), and RMS norm and its backward; the norms' backwards add
// the residual's gradient into dx when given (the fused residual add's, fused.cu). Row
// kernels run one block per row, its threads striding over the row and meeting in block
// reductions. Activations, gradients and parameters are f32, bf16 or f16 (Floats),
// computed on in f32; norms' statistics and cross-entropy's lse are f32.
// - Layer-norm weight gradients reduce over rows: blocks of columns sum chunks of rows
//   into partials, a second pass sums the chunks, so the result does not depend on
//   scheduling.
// - Embedding gradients scatter-add with atomics (rows hit by several indices): their
//   order, and so the last bits, may vary between runs.
// - Cross-entropy never stores probabilities: the forward keeps each row's log-sum-exp,
//   the backward recomputes exp(logit - lse). The mean loss and the count of rows stay on
//   the device, and the backward reads them there: nothing waits for the host.
// - Indices out of range are found by these kernels, which skip them and report them at
//   the next wait for the device (Note [Deferred device errors]).
#include <limits>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/index_kernels.cuh"
#include "cuda/backend/launch.cuh"
#include "cuda/backend/norm_rows.cuh"

namespace triad::cuda {

namespace {

// ---- softmax ----

__global__ void softmax_kernel(Floats x, Floats y, int64_t n, bool causal, int64_t tq) {
  const int64_t r = blockIdx.x, row = r * n;
  const int64_t valid = causal ? (r % tq) + (n - tq) + 1 : n;
  float mx = -kInf;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, x.load(row + j));
  mx = block_reduce(mx, MaxFloat{}, -kInf);
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) total += expf(x.load(row + j) - mx);
  total = block_reduce(total, SumOp{}, 0.0f);
  const float inv = 1.0f / total;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    y.store(row + j, j < valid ? expf(x.load(row + j) - mx) * inv : 0.0f);
}

__global__ void softmax_backward_kernel(Floats y, Floats g, Floats dx, int64_t n) {
  const int64_t row = blockIdx.x * n;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += y.load(row + j) * g.load(row + j);
  dot = block_reduce(dot, SumOp{}, 0.0f);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dx.store(row + j, y.load(row + j) * (g.load(row + j) - dot));
}

// ---- layer norm ----

__global__ void layer_norm_kernel(Floats x, Floats w, Floats b, float eps, Floats y, float* mean, float* rstd,
                                  int64_t c) {
  const int64_t r = blockIdx.x, row = r * c;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += x.load(row + j);
  layer_norm_row(x, w, b, eps, y, mean, rstd, r, c, s);
}

// res (data null: none): the residual's gradient, added to dx before it is rounded.
__global__ void layer_norm_dx_kernel(Floats g, Floats x, Floats w, const float* mean, const float* rstd, Floats dx,
                                     Floats res, int64_t c) {
  const int64_t r = blockIdx.x, row = r * c;
  const float mu = mean[r], rs = rstd[r];
  float sum_g = 0.0f, sum_gx = 0.0f;  // sums of (g w) and of (g w xhat)
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float gw = g.load(row + j) * w.load(j);
    sum_g += gw;
    sum_gx += gw * (x.load(row + j) - mu) * rs;
  }
  const float a = block_reduce(sum_g, SumOp{}, 0.0f) / float(c);
  const float bb = block_reduce(sum_gx, SumOp{}, 0.0f) / float(c);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float d = rs * (g.load(row + j) * w.load(j) - a - (x.load(row + j) - mu) * rs * bb);
    dx.store(row + j, res.data ? d + res.load(row + j) : d);
  }
}

// partial (2, chunks, c): sums of g xhat and of g over rows [chunk len, (chunk+1) len); mean
// null for RMS norm (xhat = x rstd; the sums of g are not needed).
__global__ void layer_norm_params_partial_kernel(Floats g, Floats x, const float* mean, const float* rstd,
                                                 float* partial, int64_t rows, int64_t c, int64_t len) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t begin = chunk * len, end = begin + len < rows ? begin + len : rows;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    const float gv = g.load(r * c + j);
    sw += gv * (x.load(r * c + j) - (mean ? mean[r] : 0.0f)) * rstd[r];
    sb += gv;
  }
  partial[chunk * c + j] = sw;
  partial[(chunks + chunk) * c + j] = sb;
}

// dw = the sums of g xhat, db (absent for RMS norm) the sums of g.
__global__ void layer_norm_params_final_kernel(const float* partial, Floats dw, Floats db, int64_t chunks, int64_t c) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    sw += partial[k * c + j];
    sb += partial[(chunks + k) * c + j];
  }
  dw.store(j, sw);
  if (db.data) db.store(j, sb);
}

// ---- RMS norm ----

__global__ void rms_norm_kernel(Floats x, Floats w, float eps, Floats y, float* rstd, int64_t c) {
  const int64_t r = blockIdx.x, row = r * c;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float v = x.load(row + j);
    ss += v * v;
  }
  rms_norm_row(x, w, eps, y, rstd, r, c, ss);
}

// dx = rstd (g w - x^ mean(g w x^)), x^ = x rstd.
__global__ void rms_norm_dx_kernel(Floats g, Floats x, Floats w, const float* rstd, Floats dx, Floats res, int64_t c) {
  const int64_t r = blockIdx.x, row = r * c;
  const float rs = rstd[r];
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) dot += g.load(row + j) * w.load(j) * x.load(row + j) * rs;
  const float m = block_reduce(dot, SumOp{}, 0.0f) / float(c);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float d = rs * (g.load(row + j) * w.load(j) - x.load(row + j) * rs * m);
    dx.store(row + j, res.data ? d + res.load(row + j) : d);
  }
}

// The parameter gradients of a norm over (rows, c): the partial sums over chunks of rows,
// then their sums, so the result does not depend on scheduling. mean null: RMS norm.
void norm_params_backward(const Floats& g, const Floats& x, const float* mean, const float* rstd, const Floats& dw,
                          const Floats& db, int64_t rows, int64_t c, Device device, cudaStream_t stream) {
  // Enough chunks of rows to fill the device, each at least 32 rows long.
  const int64_t column_blocks = (c + kThreads - 1) / kThreads;
  const int64_t chunks = std::clamp<int64_t>(std::min<int64_t>(1024 / column_blocks, rows / 32), 1, 65535);
  const int64_t len = (rows + chunks - 1) / chunks;
  Tensor partial = Tensor::empty({2, chunks, c}, DType::f32, device);
  layer_norm_params_partial_kernel<<<dim3(unsigned(column_blocks), unsigned(chunks)), kThreads, 0, stream>>>(
      g, x, mean, rstd, ptr<float>(partial), rows, c, len);
  TRIAD_CUDA_CHECK_LAUNCH();
  layer_norm_params_final_kernel<<<unsigned(column_blocks), kThreads, 0, stream>>>(ptr<const float>(partial), dw, db,
                                                                                   chunks, c);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaBackend::softmax(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool causal, int64_t tq) {
  const Floats fx = floats(x, "softmax"), fy = floats(y, "softmax");
  if (rows == 0 || n == 0) return;
  OnDevice on(x);
  softmax_kernel<<<unsigned(rows), row_threads(n), 0, on.stream()>>>(fx, fy, n, causal, tq);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, int64_t rows,
                                   int64_t n) {
  const char* m = "softmax_backward";
  const Floats fy = floats(y, m), fg = floats(grad_y, m), fdx = floats(grad_x, m);
  if (rows == 0 || n == 0) return;
  OnDevice on(y);
  softmax_backward_kernel<<<unsigned(rows), row_threads(n), 0, on.stream()>>>(fy, fg, fdx, n);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd) {
  const char* m = "layer_norm";
  const Floats fx = floats(x, m), fw = floats(weight, m), fb = floats(bias, m), fy = floats(y, m);
  const int64_t c = x.size(-1), rows = mean.numel();
  if (rows == 0 || c == 0) return;
  OnDevice on(x);
  layer_norm_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(fx, fw, fb, float(eps), fy, ptr<float>(mean),
                                                                        ptr<float>(rstd), c);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                      const Tensor& grad_residual) {
  const char* m = "layer_norm_backward";
  const Floats fg = floats(grad_y, m), fx = floats(x, m), fw = floats(weight, m), fdx = floats(dx, m),
               fdw = floats(dweight, m), fdb = floats(dbias, m);
  const Floats fres = grad_residual.defined() ? floats(grad_residual, m) : Floats{};
  const int64_t c = x.size(-1), rows = mean.numel();
  if (c == 0) return;
  OnDevice on(x);
  if (rows == 0) {
    TRIAD_CUDA_CHECK(cudaMemsetAsync(dweight.raw_data(), 0, dweight.nbytes(), on.stream()));
    TRIAD_CUDA_CHECK(cudaMemsetAsync(dbias.raw_data(), 0, dbias.nbytes(), on.stream()));
    return;
  }
  layer_norm_dx_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(fg, fx, fw, ptr<const float>(mean),
                                                                           ptr<const float>(rstd), fdx, fres, c);
  TRIAD_CUDA_CHECK_LAUNCH();
  norm_params_backward(fg, fx, ptr<const float>(mean), ptr<const float>(rstd), fdw, fdb, rows, c, x.device(),
                       on.stream());
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  const char* m = "rms_norm";
  const Floats fx = floats(x, m), fw = floats(weight, m), fy = floats(y, m);
  const int64_t c = x.size(-1), rows = rstd.numel();
  if (rows == 0 || c == 0) return;
  OnDevice on(x);
  rms_norm_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(fx, fw, float(eps), fy, ptr<float>(rstd), c);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                    const Tensor& dx, const Tensor& dweight, const Tensor& grad_residual) {
  const char* m = "rms_norm_backward";
  const Floats fg = floats(grad_y, m), fx = floats(x, m), fw = floats(weight, m), fdx = floats(dx, m),
               fdw = floats(dweight, m);
  const Floats fres = grad_residual.defined() ? floats(grad_residual, m) : Floats{};
  const int64_t c = x.size(-1), rows = rstd.numel();
  if (c == 0) return;
  OnDevice on(x);
  if (rows == 0) {
    TRIAD_CUDA_CHECK(cudaMemsetAsync(dweight.raw_data(), 0, dweight.nbytes(), on.stream()));
    return;
  }
  rms_norm_dx_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(fg, fx, fw, ptr<const float>(rstd), fdx, fres,
                                                                         c);
  TRIAD_CUDA_CHECK_LAUNCH();
  norm_params_backward(fg, fx, nullptr, ptr<const float>(rstd), fdw, Floats{}, rows, c, x.device(), on.stream());
}

void CudaBackend::embedding(const Tensor& weight, const Tensor& indices, const Tensor& out, TableRows rows) {
  const Floats fw = floats(weight, "embedding"), fout = floats(out, "embedding");
  const int64_t v = weight.size(0), c = weight.size(1), n = indices.numel();
  if (n == 0 || c == 0) return;
  OnDevice on(weight);
  embedding_kernel<<<blocks_for(n * c), kThreads, 0, on.stream()>>>(
      fw, indices.raw_data(), indices.dtype() == DType::i64, fout, n, c, v, rows.first, rows.vocab,
      bad_index_sink(weight.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::embedding_backward(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_weight,
                                     TableRows rows) {
  const Floats fg = floats(grad_y, "embedding_backward");
  require_floating(grad_weight, "embedding_backward");
  const int64_t v = grad_weight.size(0), c = grad_weight.size(1), n = indices.numel();
  if (n == 0 || c == 0) return;
  OnDevice on(grad_y);
  // The atomics add in f32: a 16-bit gradient is summed in an f32 buffer and rounded once.
  const bool wide = grad_weight.dtype() == DType::f32;
  const Tensor sum = wide ? grad_weight : Tensor::zeros(grad_weight.shape(), DType::f32, grad_weight.device());
  embedding_backward_kernel<<<blocks_for(n * c), kThreads, 0, on.stream()>>>(
      fg, indices.raw_data(), indices.dtype() == DType::i64, ptr<float>(sum), n, c, v, rows.first, rows.vocab,
      bad_index_sink(grad_y.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
  if (!wide) copy(grad_weight, sum);
}

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& loss,
                                const Tensor& count, int64_t ignore_index, int64_t classes) {
  const Floats fl = floats(logits, "cross_entropy");
  const int64_t rows = logits.size(0), v = classes, w = logits.size(1);
  OnDevice on(logits);
  Tensor row_loss = Tensor::empty({rows}, DType::f64, logits.device());
  if (rows > 0) {
    cross_entropy_kernel<<<unsigned(rows), row_threads(v), 0, on.stream()>>>(
        fl, ptr<const int64_t>(targets), ptr<float>(lse), ptr<double>(row_loss), rows, v, w, ignore_index,
        bad_index_sink(logits.device().index));
    TRIAD_CUDA_CHECK_LAUNCH();
  }
  cross_entropy_mean_kernel<<<1, 1024, 0, on.stream()>>>(ptr<const double>(row_loss), ptr<const int64_t>(targets), rows,
                                                         v, ignore_index, ptr<float>(loss), ptr<int64_t>(count));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                         const Tensor& grad_loss, const Tensor& count, int64_t ignore_index,
                                         int64_t classes, const Tensor& grad_logits) {
  const Floats fl = floats(logits, "cross_entropy_backward"), fg = floats(grad_logits, "cross_entropy_backward");
  const int64_t rows = logits.size(0), v = classes, w = logits.size(1);
  if (rows == 0 || w == 0) return;
  OnDevice on(logits);
  classifier_grad_kernel<<<unsigned(rows), row_threads(w), 0, on.stream()>>>(
      fl, fg, ptr<const int64_t>(targets), 0, v, w, v, ignore_index, ptr<const float>(lse), ptr<const float>(grad_loss),
      ptr<const int64_t>(count), rows, bad_index_sink(logits.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::classifier_rows(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes,
                                  int64_t vocab, int64_t ignore_index, const Tensor& lse, const Tensor& target_logit) {
  const Floats fl = floats(logits, "classifier_rows");
  const int64_t rows = logits.size(0), w = logits.size(1);
  if (rows == 0) return;
  OnDevice on(logits);
  classifier_rows_kernel<<<unsigned(rows), row_threads(std::max<int64_t>(classes, 1)), 0, on.stream()>>>(
      fl, ptr<const int64_t>(targets), first, classes, w, vocab, ignore_index, ptr<float>(lse),
      ptr<float>(target_logit), rows, bad_index_sink(logits.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::classifier_loss(const Tensor& lse, const Tensor& target_logit, const Tensor& targets, int64_t vocab,
                                  int64_t ignore_index, const Tensor& loss, const Tensor& count) {
  require_floating(lse, "classifier_loss");
  OnDevice on(lse);
  classifier_loss_kernel<<<1, 1024, 0, on.stream()>>>(ptr<const float>(lse), ptr<const float>(target_logit),
                                                      ptr<const int64_t>(targets), lse.numel(), vocab, ignore_index,
                                                      ptr<float>(loss), ptr<int64_t>(count));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::classifier_grad(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes,
                                  int64_t vocab, int64_t ignore_index, const Tensor& lse, const Tensor& grad_loss,
                                  const Tensor& count) {
  const Floats fl = floats(logits, "classifier_grad");
  const int64_t rows = logits.size(0), w = logits.size(1);
  if (rows == 0 || w == 0) return;
  OnDevice on(logits);
  classifier_grad_kernel<<<unsigned(rows), row_threads(w), 0, on.stream()>>>(
      fl, fl, ptr<const int64_t>(targets), first, classes, w, vocab, ignore_index, ptr<const float>(lse),
      ptr<const float>(grad_loss), ptr<const int64_t>(count), rows, bad_index_sink(logits.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
