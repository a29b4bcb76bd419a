// Fused neural-network kernels: softmax (optionally causal) and its backward, layer norm
// and its backward, embedding and its backward, cross-entropy and its backward
// (tensor/cpu/nn.cpp on the GPU). Row kernels run one block per row, its threads striding
// over the row and meeting in block reductions.
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

namespace triad::cuda {

namespace {

// ---- softmax ----

__global__ void softmax_kernel(const float* x, float* y, int64_t n, bool causal, int64_t tq) {
  const int64_t r = blockIdx.x;
  const float* in = x + r * n;
  float* out = y + r * n;
  const int64_t valid = causal ? (r % tq) + (n - tq) + 1 : n;
  float mx = -kInf;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, in[j]);
  mx = block_reduce(mx, MaxFloat{}, -kInf);
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    const float e = expf(in[j] - mx);
    out[j] = e;
    total += e;
  }
  total = block_reduce(total, SumOp{}, 0.0f);
  const float inv = 1.0f / total;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) out[j] = j < valid ? out[j] * inv : 0.0f;
}

__global__ void softmax_backward_kernel(const float* y, const float* g, float* dx, int64_t n) {
  const int64_t r = blockIdx.x;
  const float *yr = y + r * n, *gr = g + r * n;
  float* dr = dx + r * n;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += yr[j] * gr[j];
  dot = block_reduce(dot, SumOp{}, 0.0f);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dr[j] = yr[j] * (gr[j] - dot);
}

// ---- layer norm ----

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, float eps, float* y, float* mean,
                                  float* rstd, int64_t c) {
  const int64_t r = blockIdx.x;
  const float* in = x + r * c;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += in[j];
  const float mu = block_reduce(s, SumOp{}, 0.0f) / float(c);
  float v = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) v += (in[j] - mu) * (in[j] - mu);
  const float rs = 1.0f / sqrtf(block_reduce(v, SumOp{}, 0.0f) / float(c) + eps);
  float* out = y + r * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) out[j] = (in[j] - mu) * rs * w[j] + b[j];
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

__global__ void layer_norm_dx_kernel(const float* g, const float* x, const float* w, const float* mean,
                                     const float* rstd, float* dx, int64_t c) {
  const int64_t r = blockIdx.x;
  const float *gr = g + r * c, *in = x + r * c;
  const float mu = mean[r], rs = rstd[r];
  float sum_g = 0.0f, sum_gx = 0.0f;  // sums of (g w) and of (g w xhat)
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float gw = gr[j] * w[j];
    sum_g += gw;
    sum_gx += gw * (in[j] - mu) * rs;
  }
  const float a = block_reduce(sum_g, SumOp{}, 0.0f) / float(c);
  const float bb = block_reduce(sum_gx, SumOp{}, 0.0f) / float(c);
  float* out = dx + r * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) out[j] = rs * (gr[j] * w[j] - a - (in[j] - mu) * rs * bb);
}

// partial (2, chunks, c): sums of g xhat and of g over rows [chunk len, (chunk+1) len).
__global__ void layer_norm_params_partial_kernel(const float* g, const float* x, const float* mean, const float* rstd,
                                                 float* partial, int64_t rows, int64_t c, int64_t len) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t begin = chunk * len, end = begin + len < rows ? begin + len : rows;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    const float gv = g[r * c + j];
    sw += gv * (x[r * c + j] - mean[r]) * rstd[r];
    sb += gv;
  }
  partial[chunk * c + j] = sw;
  partial[(chunks + chunk) * c + j] = sb;
}

__global__ void layer_norm_params_final_kernel(const float* partial, float* dw, float* db, int64_t chunks, int64_t c) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    sw += partial[k * c + j];
    sb += partial[(chunks + k) * c + j];
  }
  dw[j] = sw;
  db[j] = sb;
}

}  // namespace

void CudaBackend::softmax(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool causal, int64_t tq) {
  require_f32(x, "softmax");
  if (rows == 0 || n == 0) return;
  OnDevice on(x);
  softmax_kernel<<<unsigned(rows), row_threads(n), 0, on.stream()>>>(ptr<const float>(x), ptr<float>(y), n, causal, tq);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, int64_t rows,
                                   int64_t n) {
  require_f32(y, "softmax_backward");
  if (rows == 0 || n == 0) return;
  OnDevice on(y);
  softmax_backward_kernel<<<unsigned(rows), row_threads(n), 0, on.stream()>>>(
      ptr<const float>(y), ptr<const float>(grad_y), ptr<float>(grad_x), n);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd) {
  require_f32(x, "layer_norm");
  const int64_t c = x.size(-1), rows = mean.numel();
  if (rows == 0 || c == 0) return;
  OnDevice on(x);
  layer_norm_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(
      ptr<const float>(x), ptr<const float>(weight), ptr<const float>(bias), float(eps), ptr<float>(y),
      ptr<float>(mean), ptr<float>(rstd), c);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                                      const Tensor& dbias) {
  require_f32(x, "layer_norm_backward");
  const int64_t c = x.size(-1), rows = mean.numel();
  if (c == 0) return;
  OnDevice on(x);
  if (rows == 0) {
    TRIAD_CUDA_CHECK(cudaMemsetAsync(dweight.raw_data(), 0, dweight.nbytes(), on.stream()));
    TRIAD_CUDA_CHECK(cudaMemsetAsync(dbias.raw_data(), 0, dbias.nbytes(), on.stream()));
    return;
  }
  layer_norm_dx_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(
      ptr<const float>(grad_y), ptr<const float>(x), ptr<const float>(weight), ptr<const float>(mean),
      ptr<const float>(rstd), ptr<float>(dx), c);
  TRIAD_CUDA_CHECK_LAUNCH();
  // Enough chunks of rows to fill the device, each at least 32 rows long.
  const int64_t column_blocks = (c + kThreads - 1) / kThreads;
  const int64_t chunks = std::clamp<int64_t>(std::min<int64_t>(1024 / column_blocks, rows / 32), 1, 65535);
  const int64_t len = (rows + chunks - 1) / chunks;
  Tensor partial = Tensor::empty({2, chunks, c}, DType::f32, x.device());
  layer_norm_params_partial_kernel<<<dim3(unsigned(column_blocks), unsigned(chunks)), kThreads, 0, on.stream()>>>(
      ptr<const float>(grad_y), ptr<const float>(x), ptr<const float>(mean), ptr<const float>(rstd),
      ptr<float>(partial), rows, c, len);
  TRIAD_CUDA_CHECK_LAUNCH();
  layer_norm_params_final_kernel<<<unsigned(column_blocks), kThreads, 0, on.stream()>>>(
      ptr<const float>(partial), ptr<float>(dweight), ptr<float>(dbias), chunks, c);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  require_f32(weight, "embedding");
  const int64_t v = weight.size(0), c = weight.size(1), n = indices.numel();
  if (n == 0 || c == 0) return;
  OnDevice on(weight);
  embedding_kernel<<<blocks_for(n * c), kThreads, 0, on.stream()>>>(ptr<const float>(weight), indices.raw_data(),
                                                                    indices.dtype() == DType::i64, ptr<float>(out), n,
                                                                    c, v, bad_index_sink(weight.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::embedding_backward(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_weight) {
  require_f32(grad_y, "embedding_backward");
  const int64_t v = grad_weight.size(0), c = grad_weight.size(1), n = indices.numel();
  if (n == 0 || c == 0) return;
  OnDevice on(grad_y);
  embedding_backward_kernel<<<blocks_for(n * c), kThreads, 0, on.stream()>>>(
      ptr<const float>(grad_y), indices.raw_data(), indices.dtype() == DType::i64, ptr<float>(grad_weight), n, c, v,
      bad_index_sink(grad_y.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& loss,
                                const Tensor& count, int64_t ignore_index, int64_t classes) {
  require_f32(logits, "cross_entropy");
  const int64_t rows = logits.size(0), v = classes, w = logits.size(1);
  OnDevice on(logits);
  Tensor row_loss = Tensor::empty({rows}, DType::f64, logits.device());
  if (rows > 0) {
    cross_entropy_kernel<<<unsigned(rows), row_threads(v), 0, on.stream()>>>(
        ptr<const float>(logits), ptr<const int64_t>(targets), ptr<float>(lse), ptr<double>(row_loss), rows, v, w,
        ignore_index, bad_index_sink(logits.device().index));
    TRIAD_CUDA_CHECK_LAUNCH();
  }
  cross_entropy_mean_kernel<<<1, 1024, 0, on.stream()>>>(ptr<const double>(row_loss), ptr<const int64_t>(targets), rows,
                                                         v, ignore_index, ptr<float>(loss), ptr<int64_t>(count));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                         const Tensor& grad_loss, const Tensor& count, int64_t ignore_index,
                                         int64_t classes, const Tensor& grad_logits) {
  require_f32(logits, "cross_entropy_backward");
  const int64_t rows = logits.size(0), v = classes, w = logits.size(1);
  if (rows == 0 || w == 0) return;
  OnDevice on(logits);
  cross_entropy_backward_kernel<<<unsigned(rows), row_threads(w), 0, on.stream()>>>(
      ptr<const float>(logits), ptr<const int64_t>(targets), ptr<const float>(lse), ptr<const float>(grad_loss),
      ptr<const int64_t>(count), ignore_index, ptr<float>(grad_logits), rows, v, w,
      bad_index_sink(logits.device().index));
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
