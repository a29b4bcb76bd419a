// The CUDA backend: every method of tensor/backend.h as kernels on the tensors' device,
// enqueued on the calling thread's current stream there (Note [Streams]). The methods are
// spread over files by kind as the CPU backend's are (copy.cu, elementwise.cu, reduce.cu,
// matmul.cu, fused.cu, nn.cu, optim.cu, quantize.cu, quantized_linear.cu, sample.cu,
// attention.cu and attention_mma.cu), and so are their semantics: each kernel follows the
// CPU kernel of the same method (tensor/cpu/), which is the reference the GPU tests compare
// against.
//
// dtypes follow the CPU backend: copy, fill and the random fills take every dtype the CPU
// takes (bf16/f16 conversions rounding exactly as tensor/dtype.h does); every computing
// method computes in f32 on operands stored in f32, bf16 or f16 (launch.cuh's Floats: loaded
// as float, stored rounded to nearest even, as tensor/backend.h asks), attention on tensor
// cores with f32 accumulation (attention_mma.cu); the optimizer takes f32 only. f64
// tensors, which the CPU backend computes for gradient checks, throw Error here. matmul goes
// through cuBLASLt (gemm.h), which also takes bf16/f16 operands for callers that use it
// directly.
//
// Results the methods return to the host (sums, norms, all_finite) make the host wait for
// the stream; nothing else does. Bad indices are reported at such waits (Note [Deferred
// device errors], cuda/deferred_errors.h).
#pragma once

#include "tensor/backend.h"

namespace triad::cuda {

class CudaBackend final : public Backend {
 public:
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& dst, double value) override;
  void copy_at(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) override;
  void increment(const Tensor& dst, int64_t value) override;
  void normal(const Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t first) override;
  void uniform(const Tensor& dst, double low, double high, uint64_t seed, uint64_t first) override;

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void unary(UnaryOp op, const Tensor& a, const Tensor& out, double scalar) override;
  void axpy(const Tensor& dst, const Tensor& src, double alpha) override;
  void gelu_backward(const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) override;
  void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t first) override;

  void sum_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) override;
  void max_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) override;
  void sum_all_to(const Tensor& a, const Tensor& out) override;
  double sum_squares(const std::vector<Tensor>& tensors) override;
  double max_abs(const Tensor& a) override;
  bool all_finite(const Tensor& a) override;

  void matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch, int64_t m,
              int64_t n, int64_t k, bool accumulate) override;
  void grouped_matmul(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::vector<Tensor>& out,
                      bool trans_a, bool trans_b, const std::vector<GemmDims>& dims, bool accumulate) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) override;
  void linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& pre,
                   const Tensor& out) override;
  void gelu_bias_backward(const Tensor& pre, const Tensor& grad_y, const Tensor& grad_pre,
                          const Tensor& grad_bias) override;

  void adamw(const std::vector<AdamWTensors>& updates) override;
  void sgd(const std::vector<SGDTensors>& updates, const SGDStep& step) override;
  void sum_squares_to(const std::vector<Tensor>& tensors, const Tensor& out) override;
  void clip_to_norm(const std::vector<Tensor>& grads, const Tensor& squared, double max_norm) override;
  void mul_by(const std::vector<Tensor>& tensors, const Tensor& factor) override;
  void loss_scale_step(const Tensor& squared, const Tensor& state, const Tensor& ring, const Tensor& constants,
                       const Tensor& outcome, const LossScaleRule& rule) override;
  void quantize_blocks(const Tensor& src, const Tensor& q, const Tensor& scales, int64_t rows, int64_t n,
                       const QuantFormat& format) override;
  void dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& out, int64_t rows, int64_t k, int64_t n,
                         const QuantFormat& format) override;
  void quantized_linear(const Tensor& a, const Tensor& a_scales, const PackedWeight& w, const Tensor& bias,
                        const Tensor& y, int abits, Int8Kernel kernel) override;
  void packed_rows(const PackedWeight& w, const Tensor& indices, const Tensor& out) override;
  void softmax(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool causal, int64_t tq) override;
  void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, int64_t rows, int64_t n) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                           const Tensor& grad_residual) override;
  void add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                      const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) override;
  void rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         const Tensor& dx, const Tensor& dweight, const Tensor& grad_residual) override;
  void add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps, const Tensor& sum,
                    const Tensor& y, const Tensor& rstd) override;
  void swiglu(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& grad_y, const Tensor& da,
                       const Tensor& db) override;
  void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out, bool backward) override;
  void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out, TableRows rows) override;
  void embedding_backward(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_weight,
                          TableRows rows) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& loss,
                     const Tensor& count, int64_t ignore_index, int64_t classes) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                              const Tensor& count, int64_t ignore_index, int64_t classes, const Tensor& grad_logits) override;
  void classifier_rows(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t vocab,
                       int64_t ignore_index, const Tensor& lse, const Tensor& target_logit) override;
  void classifier_loss(const Tensor& lse, const Tensor& target_logit, const Tensor& targets, int64_t vocab,
                       int64_t ignore_index, const Tensor& loss, const Tensor& count) override;
  void classifier_grad(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t vocab,
                       int64_t ignore_index, const Tensor& lse, const Tensor& grad_loss, const Tensor& count) override;
  void sample_tokens(const Tensor& logits, int64_t vocab, const TokenSampling& sampling, const Tensor& done,
                     const Tensor& tokens, const Tensor& logprobs, const Tensor& mask, const Tensor& step) override;
  void moe_route(const Tensor& probs, const Tensor& logits, const Tensor& noise, const Tensor& priority,
                 const MoERouting& routing, const Tensor& expert, const Tensor& location, const Tensor& load,
                 const Tensor& first_load) override;
  void moe_indices(const Tensor& expert, const Tensor& location, int64_t experts, int64_t capacity, const Tensor& load,
                   const Tensor& choice, const Tensor& slot, const Tensor& source) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                 double scale, const Tensor& key_start = Tensor(), const Tensor& cached = Tensor()) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& grad_out, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          double scale, const Tensor& key_start = Tensor()) override;
};

Backend& cuda_backend();

}  // namespace triad::cuda
