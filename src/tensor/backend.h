// The device seam. Every op in tensor/ops.h checks its arguments, allocates its result and
// calls exactly one method here on the backend of its inputs' device. A backend receives
// validated tensors: outputs are freshly allocated and contiguous unless a method says
// otherwise, shapes agree. Floating kernels take f64 (every floating operand f64: the CPU's
// gradient checks) or any mix of f32, bf16 and f16 operands (Note [16-bit activations] in
// autograd/functions.cpp): each value is loaded as f32, computed on in f32 as the f32 kernel
// does, and stored rounded to nearest even, so a 16-bit result is the f32 result on the
// same (rounded) inputs, rounded once. Methods that say otherwise take what they say.
#pragma once

#include <cstdint>

#include "tensor/optimizer_ops.h"

namespace triad {

struct PackedWeight;    // tensor/quantized_matmul.h
enum class Int8Kernel;  // tensor/quantized_matmul.h

enum class BinaryOp {
  add,
  sub,
  mul,
  div,
  relu_backward,  // b where a > 0, else 0
  silu_backward   // b d silu(a)/da = b s (1 + a (1 - s)), s = sigmoid(a)
};
enum class UnaryOp { neg, exp, log, sqrt, tanh, relu, gelu, silu, pow, scale, add_scalar };

class Backend {
 public:
  virtual ~Backend() = default;

  // dst and src have the same shape (src may have 0 strides), any strides, any dtypes.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;  // dst any strides
  // ops::copy_at_ and ops::increment_ as they checked their operands (index's range aside).
  virtual void copy_at(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  virtual void increment(const Tensor& dst, int64_t value) = 0;
  // dst contiguous; element i uses counter first + i of seed.
  virtual void normal(const Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t first) = 0;
  virtual void uniform(const Tensor& dst, double low, double high, uint64_t seed, uint64_t first) = 0;

  // a and b have out's shape (broadcast dimensions have stride 0), any strides.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // a has out's shape, any strides. scalar: the exponent (pow), factor (scale), addend.
  virtual void unary(UnaryOp op, const Tensor& a, const Tensor& out, double scalar) = 0;
  // dst += alpha * src; src has dst's shape (stride 0 where broadcast); dst any strides.
  virtual void axpy(const Tensor& dst, const Tensor& src, double alpha) = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) = 0;
  virtual void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t first) = 0;

  // a contiguous, viewed as (outer, n, inner); out (outer, inner).
  virtual void sum_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) = 0;
  virtual void max_dim(const Tensor& a, const Tensor& out, int64_t outer, int64_t n, int64_t inner) = 0;
  // a contiguous; out one element of a's dtype on a's device: the sum of every element, in
  // f64, rounded once to out's dtype where it is (the host waits for nothing).
  virtual void sum_all_to(const Tensor& a, const Tensor& out) = 0;
  // a contiguous; reductions to a host double.
  virtual double sum_squares(const std::vector<Tensor>& tensors) = 0;  // over all, one device
  virtual double max_abs(const Tensor& a) = 0;
  virtual bool all_finite(const Tensor& a) = 0;

  // a (batch_a, M, K) or (batch_a, K, M) when trans_a; b likewise (batch_b is 1 or batch);
  // out (batch, M, N) = a' b', or with `accumulate` out += a' b' (ops::add_matmul_). All
  // contiguous; a and b of one dtype, out of theirs or f32 beside 16-bit operands (which
  // accumulate in f32; a 16-bit out, read as f32 when accumulating, is rounded once).
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch,
                      int64_t m, int64_t n, int64_t k, bool accumulate) = 0;
  // ops::grouped_matmul: out[g] = a'[g] b'[g] (or += with `accumulate`) for every group g,
  // each group matmul's batch-1 product of its own shape dims[g] (m, n and k all above 0:
  // ops::grouped_matmul_ handles the empty ones), the four lists of one length, each tensor
  // contiguous on its own (the groups need not share a buffer or a stride). dtypes as
  // matmul's, one dtype per list.
  struct GemmDims {
    int64_t m, n, k;
    bool operator==(const GemmDims&) const = default;
  };
  virtual void grouped_matmul(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                              const std::vector<Tensor>& out, bool trans_a, bool trans_b,
                              const std::vector<GemmDims>& dims, bool accumulate) = 0;
  // ops::linear: out (rows, N) = x (rows, K) weight (N, K)^T + bias (N) on every row, all
  // contiguous; x, weight and out of one dtype; bias undefined, of that dtype or f32. 16-bit
  // operands accumulate in f32, the bias is added in f32, and the sum is rounded once.
  virtual void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) = 0;
  // ops::linear_gelu: pre = x weight^T + bias as linear writes it, out = GELU of that sum
  // before it is rounded (a 16-bit out is GELU of the f32 pre-activation, rounded once);
  // pre and out (rows, N), of x's dtype.
  virtual void linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& pre,
                           const Tensor& out) = 0;
  // ops::gelu_bias_backward: grad_pre (rows, N) = GELU'(pre) grad_y (pre, grad_y, grad_pre
  // of one shape, contiguous), rounded once; grad_bias (N), when defined, = the sum over rows
  // of grad_pre as stored, added in f32 in row order (the order of sum_dim), rounded once.
  virtual void gelu_bias_backward(const Tensor& pre, const Tensor& grad_y, const Tensor& grad_pre,
                                  const Tensor& grad_bias) = 0;

  // Fused AdamW updates of contiguous parameters (ops::adamw_, checked there), all on one
  // device: param_copy, when defined, bf16 or f16 of param's shape, contiguous, written with
  // the updated parameter rounded to nearest even in the same pass. The CUDA backend runs
  // them all in one launch (Note [Multi-tensor optimizer]).
  virtual void adamw(const std::vector<AdamWTensors>& updates) = 0;
  // Fused SGD updates (ops::sgd_, checked there), all on one device; one launch on a GPU.
  virtual void sgd(const std::vector<SGDTensors>& updates, const SGDStep& step) = 0;
  // ops::squared_norm: out (one f64 element on the tensors' device) = sum_squares(tensors),
  // the same sum in the same order, written where it is without the host waiting.
  virtual void sum_squares_to(const std::vector<Tensor>& tensors, const Tensor& out) = 0;
  // ops::clip_to_norm_: each f32 gradient multiplied by clip_coefficient(sqrt(squared[0]),
  // max_norm) (optim/clip.h) when that is below 1, squared read where it is.
  virtual void clip_to_norm(const std::vector<Tensor>& grads, const Tensor& squared, double max_norm) = 0;
  // ops::mul_by_ and ops::loss_scale_step_ (checked there), read and written where they are.
  virtual void mul_by(const std::vector<Tensor>& tensors, const Tensor& factor) = 0;
  virtual void loss_scale_step(const Tensor& squared, const Tensor& state, const Tensor& ring, const Tensor& constants,
                               const Tensor& outcome, const LossScaleRule& rule) = 0;

  // Block-wise quantization (ops::quantize_blocks) of each of the rows of src (rows, n),
  // contiguous, f32, bf16 or f16, none empty: q i8 (rows, format.bytes(n)), scales f32
  // (rows, format.blocks(n)); format checked (bits 8 or 4, block > 0 and even at 4 bits).
  virtual void quantize_blocks(const Tensor& src, const Tensor& q, const Tensor& scales, int64_t rows, int64_t n,
                               const QuantFormat& format) = 0;
  // out (rows, n) contiguous, f32, bf16 or f16: row r = the sum over j < k of row r k + j
  // of q (rows k, format.bytes(n)) dequantized with scales (rows k, format.blocks(n)), added
  // in f32 in order of j (ops::dequantize_blocks is k = 1; ops::dequantize_reduce rows = 1).
  virtual void dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& out, int64_t rows, int64_t k,
                                 int64_t n, const QuantFormat& format) = 0;
  // ops::quantized_linear (tensor/quantized_matmul.h): y f32 (m, w.n) = the tokens times w^T
  // + bias, w packed by ops::pack_weight with its tensors on this backend's device, bias f32
  // (w.n) or undefined, every tensor contiguous. abits 8: a i8 (m, w.k) holds the tokens'
  // integers and a_scales f32 (m, 1) their scales (ops::quantize_blocks, one block a row);
  // the integer sums and the f32 epilogue are that op's, in its order (Note [Integer GEMM on
  // the GPU] in cuda/backend/quantized_linear_kernels.cuh). abits 16: a is the tokens in f32
  // (m, w.k), a_scales undefined. `kernel` chooses among the CPU's kernels.
  virtual void quantized_linear(const Tensor& a, const Tensor& a_scales, const PackedWeight& w, const Tensor& bias,
                                const Tensor& y, int abits, Int8Kernel kernel) = 0;
  // ops::packed_rows (tensor/quantized_matmul.h): out f32 (m, w.k), row r = row indices[r]
  // of w (symmetric, its tensors on this backend's device) dequantized; indices i64 (m)
  // contiguous, range-checked already on the CPU (a device's kernel skips and records a bad
  // one: Note [Deferred device errors]).
  virtual void packed_rows(const PackedWeight& w, const Tensor& indices, const Tensor& out) = 0;

  // x, y (rows, n) contiguous.
  virtual void softmax(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool causal, int64_t tq) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, int64_t rows,
                                int64_t n) = 0;
  // x, y (rows, C); mean, rstd (rows) in f32 (f64 for f64 x); weight, bias, dweight, dbias
  // (C) of one dtype.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd) = 0;
  // grad_residual, when defined (contiguous, x's shape, of dx's dtype or f32 beside a
  // 16-bit dx), is added to dx in f32 before dx is rounded (ops::add_layer_norm's backward).
  virtual void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   const Tensor& grad_residual) = 0;
  // ops::add_layer_norm: sum = x + r (x, r, sum (rows, C) contiguous, of one dtype),
  // rounded to its dtype, then layer_norm of that stored sum into y, mean, rstd.
  virtual void add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                              const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) = 0;
  // RMS normalisation (ops::rms_norm): x, y (rows, C); weight (C); rstd (rows) in f32 (f64
  // for f64 x). The backward writes dx (rows, C) and dweight (C), of weight's dtype.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) = 0;
  // grad_residual as layer_norm_backward's.
  virtual void rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                 const Tensor& dx, const Tensor& dweight, const Tensor& grad_residual) = 0;
  // ops::add_rms_norm: sum = x + r rounded to its dtype, then rms_norm of the stored sum.
  virtual void add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps, const Tensor& sum,
                            const Tensor& y, const Tensor& rstd) = 0;
  // ops::swiglu: out = silu(a) b; its backward da = grad_y b silu'(a), db = grad_y silu(a).
  // All of one shape, contiguous, of one dtype; each result computed in f32 and rounded once.
  virtual void swiglu(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& grad_y, const Tensor& da,
                               const Tensor& db) = 0;
  // ops::rotary (backward: ops::rotary_backward, x the gradient): x (B, n, T, D), D even,
  // any strides; cos and sin (B or 1, T, D) contiguous (1: every row's), of x's dtype or f32
  // beside 16-bit x; out (B, n, T, D) of x's dtype, stride 1 along D, any other strides.
  // Each pair as tensor/rotary_math.h's rotary_pair in f32 (f64 for f64), rounded once.
  virtual void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out, bool backward) = 0;
  // Indices are contiguous. On the CPU the op has checked them in range. Other backends
  // get them unchecked (checking on the host would make it wait for the device): their
  // kernels must never touch memory for an index out of range, and must report it at the
  // next wait for the device (Note [Deferred device errors], cuda/deferred_errors.h).
  // The valid indices are [0, rows.vocab) (resolved: never -1); index i reads the row
  // i - rows.first when that is one of the table's, else zeros that take no gradient
  // (TableRows).
  virtual void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out, TableRows rows) = 0;
  virtual void embedding_backward(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_weight,
                                  TableRows rows) = 0;
  // logits (N, W) contiguous, of which the first `classes` <= W columns are the classes (the
  // rest, a padded vocabulary's padding, take no part); targets (N,) i64; lse (N,), loss ()
  // in f32 (f64 for f64 logits): the mean over rows that count (target != ignore_index), 0 when none
  // do; count () i64: those rows.
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& loss,
                             const Tensor& count, int64_t ignore_index, int64_t classes) = 0;
  // grad_logits (N, W) = (softmax - onehot) * grad_loss / count over the classes, zero in the
  // padding columns and in rows that do not count, in logits' dtype; grad_loss () in lse's
  // dtype and count ()
  // as cross_entropy made it, both read where they are (on the device), so the host never
  // waits for them.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                      const Tensor& grad_loss, const Tensor& count, int64_t ignore_index,
                                      int64_t classes, const Tensor& grad_logits) = 0;
  // The fused classifier (ops::classifier_rows_, ops::classifier_loss, ops::classifier_grad_,
  // Note [Fused classifier] in autograd/fused_classifier.h) works on chunks of rows of logits
  // (n, W) contiguous whose column j is class first + j for j < classes <= W (a part of a
  // vocabulary of `vocab` classes; the W - classes columns after them are padding), with
  // targets (n,) i64 in [0, vocab) or ignore_index. classifier_rows writes each row's lse
  // over those columns (-inf when classes is 0) and target_logit: the target's logit when it
  // is one of them, else 0; both (n,) in f32 (f64 for f64 logits), contiguous.
  virtual void classifier_rows(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes,
                               int64_t vocab, int64_t ignore_index, const Tensor& lse, const Tensor& target_logit) = 0;
  // loss () = the mean of lse - target_logit over the rows that count (target !=
  // ignore_index), 0 when none do, summed in f64 in a fixed order; count () i64: those rows.
  virtual void classifier_loss(const Tensor& lse, const Tensor& target_logit, const Tensor& targets, int64_t vocab,
                               int64_t ignore_index, const Tensor& loss, const Tensor& count) = 0;
  // Overwrites logits with (exp(logit - lse) - onehot(target)) * grad_loss / count over the
  // classes, zero in the padding columns and in the rows that do not count; lse (n,) is the
  // log-sum-exp over the whole vocabulary; grad_loss () in lse's dtype and count () are read
  // on the device.
  virtual void classifier_grad(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes,
                               int64_t vocab, int64_t ignore_index, const Tensor& lse, const Tensor& grad_loss,
                               const Tensor& count) = 0;

  // One step of batched generation, as ops::sample_tokens_ checked it (step may be undefined).
  virtual void sample_tokens(const Tensor& logits, int64_t vocab, const TokenSampling& sampling, const Tensor& done,
                             const Tensor& tokens, const Tensor& logprobs, const Tensor& mask, const Tensor& step) = 0;

  // Mixture-of-Experts routing and its gather indices, as ops::moe_route and
  // ops::moe_indices checked them (noise and priority may be undefined); with load
  // defined, ops::moe_indices_dropless's (capacity unused).
  virtual void moe_route(const Tensor& probs, const Tensor& logits, const Tensor& noise, const Tensor& priority,
                         const MoERouting& routing, const Tensor& expert, const Tensor& location, const Tensor& load,
                         const Tensor& first_load) = 0;
  virtual void moe_indices(const Tensor& expert, const Tensor& location, int64_t experts, int64_t capacity,
                           const Tensor& load, const Tensor& choice, const Tensor& slot, const Tensor& source) = 0;

  // Fused causal attention (ops::causal_attention): out = softmax(scale q k^T, causal) v with
  // the scores made tile by tile and never stored whole. q (B, NH, Tq, hs); k, v
  // (B, NKV, Tk, hs), none empty, Tq <= Tk, NKV dividing NH (query head h reads key/value
  // head h / (NH / NKV)); query i sees keys j <= i + Tk - Tq. q, k, v and
  // grad_out have stride 1 along hs and rows (T) at least hs apart, any other strides; so
  // have out and the gradients (which do not overlap each other or the inputs); lse is
  // contiguous. lse (B, NH, Tq): the log-sum-exp of each query's scaled scores over the
  // keys it sees, in f32 (f64 for f64 inputs). Unlike the other floating kernels these take
  // bf16 and f16 as well as f32 and f64: one dtype for q, k, v, out, grad_out, dq, dk, dv,
  // 16-bit values read and written as stored and computed in f32. key_start, when defined,
  // (B,) i64 on q's device: row b's queries also see only keys j >= key_start[b], and a
  // query that sees none outputs 0 with lse +inf (its gradients, and its part of dk and dv,
  // are 0). cached, when defined, as ops::causal_attention's (checked there: (1,) i64; its
  // value, read where the kernel runs, is the backend's to check against Tk - Tq).
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                         double scale, const Tensor& key_start = Tensor(), const Tensor& cached = Tensor()) = 0;
  // The gradients of attention: out and lse as it returned them; dq, dk, dv shaped as q, k, v
  // (NKV dividing NH: dk and dv sum over the query heads of a group).
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& grad_out, const Tensor& dq, const Tensor& dk,
                                  const Tensor& dv, double scale, const Tensor& key_start = Tensor()) = 0;
};

// The backend of a device; throws Error when that backend is not built.
Backend& backend_for(Device device);
void register_backend(DeviceType type, Backend* backend);

}  // namespace triad
