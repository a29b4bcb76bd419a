// The CPU backend: OpenMP-parallel loops the compiler vectorizes, and Eigen (over BLAS) for
// GEMM. Floating kernels are templates over float and double (bf16/f16 operands go through
// f32 copies: tensor/cpu/widen.h); the methods are spread over
// files by kind (copy.cpp, elementwise.cpp, reduce.cpp, matmul.cpp, optim.cpp, quantize.cpp,
// nn.cpp, attention.cpp).
#pragma once

#include "tensor/backend.h"

namespace triad {

class CpuBackend final : public Backend {
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

Backend& cpu_backend();

// The block quantization formats the backend interface does not carry (ops::quantize_blocks:
// 2 and 1 bits, asymmetric formats), on the CPU: src (rows, n) contiguous f32, bf16 or f16;
// q i8 (rows, format.bytes(n)); scales and offsets f32 (rows, format.blocks(n)), offsets
// undefined for a symmetric format; out (rows, n) = the sum over j < k of rows r k + j
// dequantized, as CpuBackend::dequantize_blocks.
void cpu_quantize_blocks(const Tensor& src, const Tensor& q, const Tensor& scales, const Tensor& offsets, int64_t rows,
                         int64_t n, const QuantFormat& format);
// The bits-wide field of element i of a row packed by ops::quantize_blocks, sign-extended
// (binary, a symmetric 1-bit format: 0 is -1, 1 is +1).
inline int quant_field(const int8_t* row, int bits, bool binary, int64_t i) {
  const int64_t bit = i * bits;
  const int u = (uint8_t(row[bit / 8]) >> (bit % 8)) & ((1 << bits) - 1);
  if (binary) return 2 * u - 1;
  return u >= (1 << (bits - 1)) ? u - (1 << bits) : u;
}

// ops::quantized_linear's kernels (tensor/quantized_matmul.h). a u8 (m, k): the tokens'
// integers + 128; a_scales f32 (m); a_sums i32 (m, k / group): the integers summed per group
// (asymmetric weights only, else null); y f32 (m, w.n) = the integer GEMM with the epilogue
// of ops::quantized_linear, plus bias (f32 (n), or null).
struct PackedWeight;
// kernel: best (the fastest this CPU has: cpu_best_int8_kernel) or one the CPU has (else throws).
void cpu_int8_gemm(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
                   const float* bias, float* y, Int8Kernel kernel);
// y f32 (m, w.n) = x f32 (m, k) w^T + bias, w widened a tile at a time.
void cpu_widened_gemm(const float* x, int64_t m, const PackedWeight& w, const float* bias, float* y);
// Fills w.data, scales, offsets and sums from q as ops::quantize_blocks made it.
void cpu_pack_weight(const Quantized& q, PackedWeight& w);
bool cpu_has_int8_kernel(Int8Kernel kernel);
Int8Kernel cpu_best_int8_kernel();

void cpu_dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& offsets, const Tensor& out,
                           int64_t rows, int64_t k, int64_t n, const QuantFormat& format);

}  // namespace triad
