// The fused ops of the transformer block on the GPU (tensor/backend.h): linear + GELU in
// cuBLASLt's GELU epilogue, which keeps the pre-activation (a kernel adds the bias and GELU
// where the epilogue cannot: an f32 bias beside a 16-bit product, or a width the epilogue's
// auxiliary output does not take); GELU's backward with the bias gradient, SwiGLU, the
// rotary embedding, and the residual add fused into the norms as kernels
// (fused_kernels.cuh). The norms' backwards, which add the residual's gradient, are in nn.cu.
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/fused_kernels.cuh"
#include "cuda/backend/launch.cuh"
#include "cuda/gemm.h"

namespace triad::cuda {

void CudaBackend::linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& pre,
                              const Tensor& out) {
  const char* m = "linear_gelu";
  require_floating(x, m);
  const int64_t n = weight.size(0), total = out.numel();
  GemmOptions o;
  o.epilogue = bias.defined() ? Epilogue::bias_gelu : Epilogue::gelu;
  o.bias = bias;
  o.pre_gelu = pre;
  const bool fits = (!bias.defined() || bias.dtype() == out.dtype()) && n % 8 == 0;  // the epilogue's limits
  const Tensor product = linear_product(x, weight, out, o, fits);
  if (!product.defined() || total == 0) return;
  OnDevice on(out);
  bias_gelu_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(
      ptr<const float>(product), bias.defined() ? floats(bias, m) : Floats{}, floats(pre, m), floats(out, m), total, n);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_bias_backward(const Tensor& pre, const Tensor& grad_y, const Tensor& grad_pre,
                                     const Tensor& grad_bias) {
  const char* m = "gelu_bias_backward";
  const Floats fp = floats(pre, m), fg = floats(grad_y, m), fd = floats(grad_pre, m);
  const int64_t n = pre.size(-1), rows = n ? pre.numel() / n : 0;
  if (n == 0) return;
  OnDevice on(pre);
  if (rows == 0) {
    if (grad_bias.defined()) fill(grad_bias, 0.0);
    return;
  }
  // Enough chunks of rows to fill the device, each at least 32 rows long (as the norms'
  // parameter gradients, nn.cu).
  const int64_t column_blocks = (n + kThreads - 1) / kThreads;
  const int64_t chunks = std::clamp<int64_t>(std::min<int64_t>(1024 / column_blocks, rows / 32), 1, 65535);
  const int64_t len = (rows + chunks - 1) / chunks;
  Tensor partial = grad_bias.defined() ? Tensor::empty({chunks, n}, DType::f32, pre.device()) : Tensor();
  gelu_bias_backward_kernel<<<dim3(unsigned(column_blocks), unsigned(chunks)), kThreads, 0, on.stream()>>>(
      fp, fg, fd, partial.defined() ? ptr<float>(partial) : nullptr, rows, n, len);
  TRIAD_CUDA_CHECK_LAUNCH();
  if (!grad_bias.defined()) return;
  column_sum_kernel<<<unsigned(column_blocks), kThreads, 0, on.stream()>>>(ptr<const float>(partial),
                                                                           floats(grad_bias, m), chunks, n);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::swiglu(const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* m = "swiglu";
  const Floats fa = floats(a, m), fb = floats(b, m), fo = floats(out, m);
  const int64_t total = out.numel();
  if (total == 0) return;
  OnDevice on(out);
  swiglu_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(fa, fb, fo, total);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& grad_y, const Tensor& da,
                                  const Tensor& db) {
  const char* m = "swiglu_backward";
  const Floats fa = floats(a, m), fb = floats(b, m), fg = floats(grad_y, m), fda = floats(da, m), fdb = floats(db, m);
  const int64_t total = a.numel();
  if (total == 0) return;
  OnDevice on(a);
  swiglu_backward_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(fa, fb, fg, fda, fdb, total);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out, bool backward) {
  const char* m = backward ? "rotary_backward" : "rotary";
  const Floats fx = floats(x, m), fc = floats(cos, m), fs = floats(sin, m), fo = floats(out, m);
  const int64_t total = out.numel() / 2;
  if (total == 0) return;
  const RotaryShape s{x.size(1),
                      x.size(2),
                      x.size(3),
                      {x.stride(0), x.stride(1), x.stride(2), x.stride(3)},
                      cos.size(0) > 1,
                      {out.stride(0), out.stride(1), out.stride(2)}};
  OnDevice on(out);
  if (total < (int64_t(1) << 31))
    rotary_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(fx, s, fc, fs, fo, uint32_t(total), backward);
  else
    rotary_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(fx, s, fc, fs, fo, total, backward);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                                 const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const char* m = "add_layer_norm";
  const Floats fx = floats(x, m), fr = floats(r, m), fw = floats(weight, m), fb = floats(bias, m), fs = floats(sum, m),
               fy = floats(y, m);
  const int64_t c = x.size(-1), rows = mean.numel();
  if (rows == 0 || c == 0) return;
  OnDevice on(x);
  add_layer_norm_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(fx, fr, fw, fb, float(eps), fs, fy,
                                                                            ptr<float>(mean), ptr<float>(rstd), c);
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps, const Tensor& sum,
                               const Tensor& y, const Tensor& rstd) {
  const char* m = "add_rms_norm";
  const Floats fx = floats(x, m), fr = floats(r, m), fw = floats(weight, m), fs = floats(sum, m), fy = floats(y, m);
  const int64_t c = x.size(-1), rows = rstd.numel();
  if (rows == 0 || c == 0) return;
  OnDevice on(x);
  add_rms_norm_kernel<<<unsigned(rows), row_threads(c), 0, on.stream()>>>(fx, fr, fw, float(eps), fs, fy,
                                                                          ptr<float>(rstd), c);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
