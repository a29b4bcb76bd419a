// Raw tensor operations: no gradient tracking. Each function here is the single dispatch
// point of its op: it checks its arguments (throwing triad::Error that names the op and the
// shapes involved), allocates the result, and hands the work to the backend of the inputs'
// device (tensor/backend.h). Floating-point kernels compute in f32 or f64; bf16/f16 are
// storage types that every floating op reads and writes as stored, computing in f32 and
// rounding each 16-bit result once to nearest even (Note [16-bit activations] in
// autograd/functions.cpp). An op's result has its input's dtype; an elementwise op mixing
// f32 with bf16 (or f16) returns the 16-bit dtype; f64 mixes with nothing.
//
// The differentiable versions a model uses are in autograd/functions.h (namespace triad).
#pragma once

#include "tensor/expert_routing.h"
#include "tensor/random.h"
#include "tensor/sampling.h"
#include "tensor/tensor.h"

namespace triad {

// Hyper-parameters of one Adam update (ops::adamw_).
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1, bias_correction2;  // 1 - beta^t (1 and 1: no bias correction)
  bool adam_w_mode = true;                    // decoupled weight decay; false: L2
};

// Elements per quantization block unless a caller chooses otherwise. DeepSpeed's ZeRO++
// weight quantizer (qwZ) aims at groups of about 4k elements ("the optimal size is 4k") and
// keeps them below 8000; its gradient quantizer (qgZ) makes one group per row of a weight,
// a few thousand elements in the models it targets. A power of two keeps blocks aligned to
// vector widths and whole bytes at 4 bits.
inline constexpr int64_t kQuantBlock = 4096;
// ZeRO++'s int4 gradient blocks: at 4 bits, 4096-element blocks round most gradients of a
// block to zero and cost measurable convergence; 256 do not (Note [ZeRO++], block sizes).
inline constexpr int64_t kGradientQuantBlock = 256;

// The layout of block-wise quantization (ops::quantize_blocks): a sequence of n values is
// cut into blocks of `block` elements (the last may be shorter), each stored as `bits`-bit
// integers and one f32 scale (and, asymmetric, one f32 offset). ZeRO++'s collectives use
// the symmetric 8- and 4-bit formats; compression (ZeroQuant, XTC) all of them.
struct QuantFormat {
  int bits = 8;                 // 8, 4, 2 or 1; values packed low bits first into bytes
  int64_t block = kQuantBlock;  // elements sharing one scale; block bits a multiple of 8 (whole bytes)
  bool symmetric = true;        // false: a per-block offset too (min/max rather than max |x|)
  // The largest |q| of a symmetric format: 127, 7, 1 (ternary) or 1 (binary, q = +-1).
  int qmax() const { return bits == 1 ? 1 : (1 << (bits - 1)) - 1; }
  int64_t bytes(int64_t n) const { return (n * bits + 7) / 8; }  // i8 elements holding n values
  int64_t blocks(int64_t n) const { return (n + block - 1) / block; }
};

// A quantized tensor: q i8 (..., bytes(n)) and scales f32 (..., blocks(n)) for a source of
// shape (..., n); offsets f32 like scales for an asymmetric format, else undefined.
struct Quantized {
  Tensor q, scales, offsets;
};

// Which indices a table (V, C) of ops::embedding answers, and with which of its rows: the
// indices in [0, vocab) are valid, and index i reads row i - first when that is one of the
// table's rows, else a row of zeros that takes no gradient. The default (vocab -1: V) is
// the whole table. Two others:
// - TableRows::zero_past_end(V), {0, V + 1}: the index V reads zeros, as if a row of zeros
//   were appended to the table (without the copy): an empty slot or a dropped choice of an
//   MoE routing (ops::moe_indices).
// - {first, vocab}: the rows [first, first + V) of a vocabulary split over ranks (the
//   vocab-parallel embedding, parallel/tensor_parallel_layers.h): the other ranks' tokens
//   read zeros, with no mask and nothing read on the host.
struct TableRows {
  int64_t first = 0, vocab = -1;
  static TableRows zero_past_end(int64_t rows) { return {0, rows + 1}; }
};

}  // namespace triad

namespace triad::ops {

// ---- views: share storage ----
Tensor view(const Tensor& t, Shape shape);     // one dimension may be -1; t must be viewable
Tensor reshape(const Tensor& t, Shape shape);  // a view when possible, else a contiguous copy
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor expand(const Tensor& t, const Shape& shape);  // broadcast view (strides 0)
Tensor flatten(const Tensor& t);                     // reshape to (numel,)

// ---- copies and conversion ----
Tensor contiguous(const Tensor& t);       // t itself when already contiguous
Tensor clone(const Tensor& t);            // always a new contiguous tensor
Tensor to(const Tensor& t, DType dtype);  // t itself when already of that dtype
// A contiguous copy on `device` (between two CUDA devices through the host); t itself when
// already there. The host waits for a copy to the host, not for one to a device.
Tensor to(const Tensor& t, Device device);
void copy_(const Tensor& dst, const Tensor& src);  // src broadcast to dst's shape, dtype converted
// How many copies between two different floating dtypes to() and copy_ have made in this
// process: a mixed-precision step whose activations keep their dtype makes none.
uint64_t conversion_count();
void fill_(const Tensor& dst, double value);
inline void zero_(const Tensor& dst) { fill_(dst, 0.0); }
// Note [Positions on the device]: the ops below take a position as a (1,) i64 tensor on the
// device, read where the kernel runs, instead of a host integer baked into the launch, so
// that one recorded decode step replays at a moving position (Note [Decode graphs] in
// engine/generate.h); increment_ advances such counters on the device.
// dst.narrow(dim, i, src.size(dim)) = src with i = index[0]: dst and src of one dtype and
// device, of one shape but along dim (any strides); index (1,) i64 on their device. An i
// outside [0, dst.size(dim) - src.size(dim)] is an Error (on a GPU raised at the next wait,
// Note [Deferred device errors] in cuda/deferred_errors.h, nothing written).
void copy_at_(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src);
// dst += value, elementwise, for a contiguous i64 dst (Note [Positions on the device]).
void increment_(const Tensor& dst, int64_t value);

// ---- random fills (counter-based, see tensor/random.h) ----
void normal_(const Tensor& dst, double mean, double stddev, Generator& gen = default_generator());
void uniform_(const Tensor& dst, double low, double high, Generator& gen = default_generator());

// ---- elementwise, numpy broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
// dst += alpha * src; src of dst's dtype, or f32 for a 16-bit dst (added in f32, rounded once).
void add_(const Tensor& dst, const Tensor& src, double alpha = 1.0);
void mul_(const Tensor& dst, double factor);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor relu_backward(const Tensor& y, const Tensor& grad_y);  // grad_y where y > 0, else 0
Tensor pow(const Tensor& a, double exponent);
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& x);
Tensor gelu_backward(const Tensor& x, const Tensor& grad_y);
// SiLU (swish), x sigmoid(x) with sigmoid(x) = (1 + tanh(x/2)) / 2 (finite for every x),
// and its backward: grad_y sigmoid(x) (1 + x (1 - sigmoid(x))).
Tensor silu(const Tensor& x);
Tensor silu_backward(const Tensor& x, const Tensor& grad_y);
// SwiGLU's product, fused: silu(a) b for a and b of one shape and dtype, computed in f32
// (f64 for f64) and rounded once, where silu(a) and mul would round silu(a) first (so a
// 16-bit result may differ from that composition in its last bit; f32 and f64 results are
// the composition's bit for bit). The backward: da = grad_y b silu'(a), db = grad_y silu(a),
// each rounded once (grad_y of a's shape and dtype).
Tensor swiglu(const Tensor& a, const Tensor& b);
struct SwigluGrads {
  Tensor da, db;
};
SwigluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& grad_y);
// Bernoulli(1-p) mask scaled by 1/(1-p): draws from counters first..first+numel-1 of seed,
// so the mask of a given (seed, first) can be replayed (backward, recomputation).
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t first);

// ---- reductions (f32 inputs accumulate in double where the result is a scalar; a result
// has its input's dtype) ----
Tensor sum(const Tensor& a);  // all elements -> shape ()
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor sum_to(const Tensor& a, const Shape& shape);  // sums the dimensions broadcasting added
// The sum of the squares of every element of every tensor, in double, for gradient norms:
// the host waits for a device once, however many tensors. All on one device.
double sum_squares(const std::vector<Tensor>& tensors);
double max_abs(const Tensor& a);
bool all_finite(const Tensor& a);

// ---- linear algebra ----
// a (..., M, K) and b (..., K, N) -> (..., M, N); with trans_a / trans_b the last two
// dimensions of that operand are read transposed. b may be 2-D (shared by every batch).
// a and b share a floating dtype, the result's; bf16/f16 operands accumulate in f32 (on a
// CUDA device on tensor cores) and round once.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// out += matmul(a, b, trans_a, trans_b) in one accumulating GEMM (cuBLASLt's beta = 1), the
// form a backward uses to add a weight's gradient into a buffer that holds one already
// (Note [Gradients added in place] in autograd/weight_grad.h). out: contiguous, matmul's
// shape, of a's dtype or f32 beside 16-bit operands. A 16-bit out is read as f32, the
// product added to it in f32 and the sum rounded once (matmul then add_ rounds twice). In
// f32 and f64 the sum may differ from matmul then add_ in its order only (a GEMM adds its
// blocks of K into out as it goes): by a few ulps of the sum of the magnitudes.
void add_matmul_(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// Grouped products (an MoE layer's experts, nn/moe_experts.h): for every group g,
// out[g] = matmul(a[g], b[g], trans_a, trans_b), or with `accumulate` out[g] +=
// (add_matmul_'s contract), in one backend call (on a GPU one batched or grouped GEMM:
// Note [Grouped GEMM on the GPU] in cuda/backend/matmul.cu). a[g] and b[g] 2-D, each group
// of its own shape (a dropless MoE layer's experts run on as many rows as they received,
// some on none: an empty product writes nothing, and one over an inner dimension of 0
// writes zeros or adds nothing), the operands of one dtype on one device, anywhere in
// memory; out[g] contiguous, of matmul's shape, of a's dtype or f32 beside 16-bit
// operands, one dtype for all. On the CPU each group is matmul's (add_matmul_'s) product
// bit for bit.
void grouped_matmul_(const std::vector<Tensor>& out, const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                     bool trans_a, bool trans_b, bool accumulate);
// x (..., in), weight (out, in) of x's dtype, bias (out) of that dtype (or f32 beside a
// 16-bit one) or undefined -> x weight^T + bias, (..., out), added in f32 before rounding.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// A GPT MLP's first layer, fused: y = GELU(x weight^T + bias) (arguments as linear's; bias
// may be undefined), and pre = x weight^T + bias, the GELU's input the backward needs. pre
// is linear's result bit for bit; y is GELU of the sum before it is rounded, so a 16-bit y
// is the f32 composition rounded once (gelu(linear(...)) rounds pre first and may differ in
// the last bit); f32 and f64 y equal gelu(linear(...)) on the CPU. On a CUDA device the GELU
// runs in cuBLASLt's epilogue (cuda/gemm.h), within a few f32 ulps of the CPU's.
struct LinearGeluOut {
  Tensor y, pre;  // (..., out) in x's dtype
};
LinearGeluOut linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);
// The backward through that GELU and bias: grad_pre = gelu_backward(pre, grad_y) (the same
// bits), and, when `with_bias`, grad_bias (out) = sum(grad_pre, 0 .. -2) of the stored
// grad_pre (the same bits as ops::sum over the rows on the CPU) in pre's dtype, in one pass.
struct GeluBiasGrads {
  Tensor grad_pre, grad_bias;
};
GeluBiasGrads gelu_bias_backward(const Tensor& pre, const Tensor& grad_y, bool with_bias);

// ---- optimizer kernels ----
// Fused in-place Adam on one parameter (PyTorch's arithmetic, in this order):
//   adam_w_mode (AdamW): p *= 1 - lr wd;   else (L2, PyTorch's Adam): g += wd p;
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps).
// param, exp_avg, exp_avg_sq: same shape and dtype (f32 or f64), contiguous; grad: same shape.
// param_copy, when given (mixed precision: param is the f32 master weight): a contiguous
// bf16/f16 tensor of param's shape on its device, which the same pass writes with the
// updated parameter rounded once, so no conversion runs after the step.
void adamw_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
            const AdamWStep& step, const Tensor& param_copy = Tensor());

// ---- block-wise quantization (ZeRO++'s quantized collectives, compression) ----
// Every row along the last dimension of src (..., n) is quantized on its own, in blocks of
// format.block elements (the row's last block may be shorter). Symmetric formats:
//   scale = max |x| / qmax over the block (qmax 127 at 8 bits, 7 at 4), in f32;
//   q = x / scale rounded to nearest, ties to even, clamped to [-qmax, qmax].
// So |x - q scale| <= scale / 2 up to f32 rounding, and values k scale come back exactly.
// At 2 bits (ternary, TWN's rule as XTC uses it) q = sign(x) where |x| > 0.7 mean |x| of
// the block and 0 elsewhere, scale = mean |x| of the values above that threshold. At 1 bit
// (XTC's binary weights) q = sign(x) in {-1, +1} (+1 for x >= 0) and scale = mean |x| over
// the block, which minimises the block's squared error.
// Asymmetric formats (levels L = 2^bits - 1, half H = 2^(bits-1)):
//   scale = (max x - min x) / L; u = (x - min x) / scale rounded as above, clamped to
//   [0, L]; stored q = u - H in [-H, H - 1]; offset = min x + H scale,
// so that x ~ q scale + offset within scale / 2 (a block of equal values: scale 0, q -H,
// offset its value).
// Packing: element i of a row is the bits-wide two's complement field at bit (i bits) % 8
// of byte (i bits) / 8 (at 4 bits element 2i is the low nibble of byte i, 2i+1 the high
// one); the binary format stores 1 for +1 and 0 for -1. A row's unused last bits are 0.
// Special blocks, so that overflow checks still see what the source held:
// - a block holding a NaN or an infinity gets scale NaN and q 0: every value dequantized
//   from it is NaN;
// - a symmetric block whose scale would be 0 or below 2^-119 (leaving f32's normal range)
//   gets scale 0 and q 0 (binary: q -1): it comes back as zeros.
// src is f32, bf16 or f16 (16-bit values are read as stored). The symmetric 8- and 4-bit
// formats run on any device; the others on the CPU (elsewhere an Error names the format).
Quantized quantize_blocks(const Tensor& src, const QuantFormat& format = {});
// out (..., n) = q scale (+ offset), the inverse of quantize_blocks (q and scales as it made
// them for a source of out's shape); out contiguous, f32, bf16 or f16 (written rounded to
// nearest even from f32). The first form is for symmetric formats.
void dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& out, const QuantFormat& format = {});
void dequantize_blocks(const Quantized& x, const Tensor& out, const QuantFormat& format);
// out (n) = the sum over k of row k of q (k, bytes(n)) dequantized with scales (k,
// blocks(n)): k slices quantized on their own (qgZ's all-to-all delivers one per peer),
// added in f32 in row order, written once in out's dtype (contiguous; f32, bf16 or f16).
void dequantize_reduce(const Tensor& q, const Tensor& scales, const Tensor& out, const QuantFormat& format = {});

// ---- neural-network kernels ----
// Softmax over the last dimension. causal: for (..., Tq, Tk), query i sees keys
// j <= i + (Tk - Tq) (the last Tq queries of a sequence of Tk); masked entries are 0.
Tensor softmax(const Tensor& x, bool causal = false);
Tensor softmax_backward(const Tensor& y, const Tensor& grad_y);

struct LayerNormOut {
  Tensor y, mean, rstd;  // y in x's dtype; mean and rstd: (rows,) in f32 (f64 for f64 x)
};
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
// Over the last dimension C: y = (x - mean) * rstd * weight + bias; weight, bias: (C,), of
// x's dtype or f32 beside a 16-bit x. The backward's dx has grad_y's dtype (grad_y of x's,
// or f32), dweight and dbias weight's.
LayerNormOut layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// grad_residual, when given (x's shape, of grad_y's dtype or f32 beside a 16-bit one), is
// added to dx in f32 before dx is rounded: the gradient the sum of add_layer_norm receives
// along the residual stream, so the backward needs no add of its own.
LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& grad_residual = Tensor());
// The residual add of a pre-norm block fused into the norm: sum = x + r (one shape and
// dtype; the next residual stream), rounded to that dtype as ops::add rounds it, and y,
// mean, rstd = layer_norm(sum) of the stored sum: every result equals add then layer_norm
// bit for bit.
struct AddLayerNormOut {
  Tensor sum, y, mean, rstd;
};
AddLayerNormOut add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps);

struct RmsNormOut {
  Tensor y, rstd;  // y in x's dtype; rstd (rows,) in f32 (f64 for f64 x)
};
struct RmsNormGrads {
  Tensor dx, dweight;
};
// Llama's RMSNorm over the last dimension C: y = x rstd weight, rstd = 1 / sqrt(mean(x^2)
// + eps), eps > 0; weight (C,) as layer_norm's. The backward (dx of grad_y's dtype, dweight
// of weight's): dx = rstd (g w - x^ mean(g w x^)), dweight = the sum over rows of g x^,
// x^ = x rstd.
RmsNormOut rms_norm(const Tensor& x, const Tensor& weight, double eps);
// grad_residual as layer_norm_backward's.
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               const Tensor& grad_residual = Tensor());
// add_layer_norm for RMSNorm: sum = x + r, then rms_norm of the stored sum, bit for bit.
struct AddRmsNormOut {
  Tensor sum, y, rstd;
};
AddRmsNormOut add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps);

// Rotary position embedding in the rotate_half layout (nn/rotary.h), fused: x (..., T, D),
// D even, with tables cos, sin (T, D), or (B, 1, T, D) for x (B, n, T, D) (each row's own
// positions), of x's dtype or f32 beside a 16-bit x -> y of x's shape and dtype (stored
// as x is when x is a (B, n, T, D) view of a (B, T, n D) projection's heads, so y's
// (B, T, n D) view is free, Note [Attention layout]; else contiguous): for each feature
// pair (i, i + h), h = D/2,
//   y_i = x_i cos_i - x_{i+h} sin_i,   y_{i+h} = x_{i+h} cos_{i+h} + x_i sin_{i+h},
// that is x cos + rotate_half(x) sin with rotate_half(x) = cat(-x[..., h:], x[..., :h]),
// for any tables. Each result is computed in f32 (f64 for f64) as one fused multiply-add
// of the other, rounded, product (tensor/rotary_math.h) and rounded once to x's dtype, so
// it lies within one rounding of the exact value where the composition rounded three
// times. x is read through its strides (a view of a projection's heads, up to 4
// dimensions; more leading dimensions are merged first, by reshape).
Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin);
// Its backward, grad_y cos - rotate_half(grad_y sin) (the op is linear in x):
//   dx_i = g_i cos_i + g_{i+h} sin_{i+h},   dx_{i+h} = g_{i+h} cos_{i+h} - g_i sin_i,
// with grad_y of x's shape and dtype and the tables as rotary's; rounded the same way.
Tensor rotary_backward(const Tensor& grad_y, const Tensor& cos, const Tensor& sin);

// weight (V, C), indices (...) of i64 or i32 in [0, V) (or `rows`' range) -> (..., C). An
// index out of range throws Error: here on the CPU; on a GPU at the next wait for the device
// (Note [Deferred device errors]), as do the targets of cross_entropy.
Tensor embedding(const Tensor& weight, const Tensor& indices, TableRows rows = {});
// Scatter-adds grad_y (..., C) into a zero (V, C) gradient at the rows `indices` read (those
// of `rows`), in f32 for a 16-bit grad_y, rounded once into the result (of grad_y's dtype).
Tensor embedding_backward(const Tensor& grad_y, const Tensor& indices, int64_t num_embeddings, TableRows rows = {});

struct CrossEntropyOut {
  Tensor loss;   // shape (): mean over rows whose target != ignore_index (0 when none)
  Tensor lse;    // (N,) log-sum-exp of each row of logits (for the backward)
  // loss and lse are f32 for f32, bf16 and f16 logits (f64 for f64).
  Tensor count;  // shape (), i64: rows that count (targets != ignore_index)
};
// logits (N, W), targets (N,) of i64/i32 in [0, V) or == ignore_index, where V = classes
// (-1: W) is the number of classes and the W - V columns after them are padding (a padded
// vocabulary), which take no part in the softmax. Probabilities are never stored; the
// backward recomputes them from logits and lse. All three results stay on logits' device:
// nothing here makes the host wait for a device.
CrossEntropyOut cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, int64_t classes = -1);
// d(loss)/d(logits) (N, W) scaled by grad_loss (one value: the incoming gradient of the mean
// loss), with count as cross_entropy returned it; zero in the padding columns; in logits'
// dtype.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                              const Tensor& count, int64_t ignore_index, int64_t classes = -1);

// The fused classifier's pieces (Note [Fused classifier] in autograd/fused_classifier.h),
// for a chunk of rows of logits (n, W) holding the classes [first, first + classes) of a
// vocabulary of `vocab` (classes <= W; the columns after them are padding), targets (n,)
// of i64/i32 in [0, vocab) or == ignore_index. Stats are f32 (f64 for f64 logits), on
// logits' device; nothing here makes the host wait for a device.
// classifier_rows_ writes each row's log-sum-exp over its classes (-inf when there are
// none) into lse (n,) and the target's logit (0 when it is not one of them, or ignored)
// into target_logit (n,), both contiguous (views of a whole batch's stats).
void classifier_rows_(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t vocab,
                      int64_t ignore_index, const Tensor& lse, const Tensor& target_logit);
// The mean of lse - target_logit over the N rows whose target != ignore_index (0 when
// none), and their count, as cross_entropy returns them (its lse is these lse).
CrossEntropyOut classifier_loss(const Tensor& lse, const Tensor& target_logit, const Tensor& targets, int64_t vocab,
                                int64_t ignore_index);
// In place: logits become d(loss)/d(logits) scaled by grad_loss as cross_entropy_backward
// computes it, given the whole vocabulary's lse (n,) and count as classifier_loss returned
// it: zero in the padding columns and the ignored rows.
void classifier_grad_(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t vocab,
                      int64_t ignore_index, const Tensor& lse, const Tensor& grad_loss, const Tensor& count);

// One step of batched generation (Note [Token sampling] in tensor/sampling.h): logits (B, W)
// f32 with stride 1 along W (rows any stride apart), of which the first `vocab` columns are
// the vocabulary; done (B,) f32 (1: the row has stopped), updated; tokens (B,) i64,
// logprobs (B,) f32 and mask (B,) f32 written; all contiguous but logits, on logits' device.
// Nothing here makes the host wait for a device. step, when defined, (1,) i64 on logits'
// device: the step the draws use instead of sampling.step (Note [Positions on the device]).
void sample_tokens_(const Tensor& logits, int64_t vocab, const TokenSampling& sampling, const Tensor& done,
                    const Tensor& tokens, const Tensor& logprobs, const Tensor& mask, const Tensor& step = Tensor());

// Mixture-of-Experts routing (tensor/expert_routing.h, Note [MoE routing] in
// nn/moe_routing.h): probs and logits (S, E) f32 or f64 (the CUDA backend: f32), contiguous,
// on one device; noise and priority, when given, (S, E) f64 there (they replace the draws
// of `routing`). All results on that device, i64: expert and location (S, k), a choice's
// expert and its slot there (-1 when dropped); load and first_load (E), the choices and the
// first choices each expert received before capacity. Nothing here makes the host wait.
struct MoERouteOut {
  Tensor expert, location, load, first_load;
};
MoERouteOut moe_route(const Tensor& probs, const Tensor& logits, const MoERouting& routing,
                      const Tensor& noise = Tensor(), const Tensor& priority = Tensor());
// The gather indices of a routing (expert and location as moe_route made them, capacity
// slots per expert), i64 on their device: choice (S, k), s E + expert of a kept choice and
// S E when dropped (rows of the gate's probabilities viewed (S E, 1), S E past their end);
// slot (S, k), expert C + location, E C when dropped (rows of the experts' outputs (E C, d),
// E C past their end); source (E, C), the token in each slot, S when empty (rows of the
// tokens (S, d), S past their end). Gathered by embedding with TableRows::zero_past_end, an index past
// the end reads zeros (Note [MoE gathers] in nn/moe_routing.h).
struct MoEIndices {
  Tensor choice, slot, source;
};
MoEIndices moe_indices(const Tensor& expert, const Tensor& location, int64_t experts, int64_t capacity);
// The gather indices of a dropless routing (every choice kept; load (E) as moe_route made
// it) over the routed rows grouped by expert, no slot empty: choice as moe_indices';
// slot (S, k), load[0] + ... + load[e - 1] + location for a choice of expert e (rows of the
// experts' outputs (S k, d)); source (S k), the token of each row.
MoEIndices moe_indices_dropless(const Tensor& expert, const Tensor& location, const Tensor& load);

// Note [Attention layout]: attention's output and gradients are (B, NH, T, hs) tensors
// stored as (B, T, NH, hs), a position's heads side by side: the transpose to (B, T, NH hs)
// that every model makes next for its output projection is then a view, not a copy, and so
// is the gradient's way back from it to the heads.
struct AttentionOut {
  Tensor out;  // (B, NH, Tq, hs) in q's dtype, laid out as Note [Attention layout] says
  Tensor lse;  // (B, NH, Tq): log-sum-exp of each query's scaled scores; f32 (f64 for f64 q)
};
struct AttentionGrads {
  Tensor dq, dk, dv;
};
// Causal scaled dot-product attention, fused (flash attention):
//   out = softmax(scale q k^T, causal) v
// without storing the (Tq, Tk) probabilities; the backward recomputes them from lse.
// q (B, NH, Tq, hs); k, v (B, NKV, Tk, hs) with Tq <= Tk; query i sees keys
// j <= i + (Tk - Tq), as softmax's causal mask. NKV divides NH: query head h attends with
// key/value head h / (NH / NKV) (grouped-query attention, read in place: no repeated copies
// of k and v; NKV = NH is multi-head attention). One floating dtype for q, k, v: f32, f64,
// or bf16/f16, which the backends read as stored and compute in f32 (the CUDA backend takes
// no f64). Any strides (views of a fused qkv projection need no copy when hs has stride 1).
// key_start, when given, (B,) i64 on q's device (Note [Left-padded batches] in
// nn/language_model.h): query i of row b sees keys key_start[b] <= j <= i + Tk - Tq; a
// query that sees no key (a pad) outputs 0, lse +inf, and passes no gradient.
// cached, when given, (1,) i64 on q's device (Note [Positions on the device]): only k's and
// v's first cached[0] + Tq keys count, the queries following cached[0] cached ones (query i
// sees keys j <= i + cached[0]); the rest of k and v (a cache's unfilled capacity) is never
// read. Forward only: causal_attention_backward takes no cached.
AttentionOut causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                              const Tensor& key_start = Tensor(), const Tensor& cached = Tensor());
// Gradients for q, k, v (in their dtype) given the forward's out and lse and grad_out
// (shaped as out; grouped key/value heads' gradients sum over their query heads, with no
// repeated copies either), laid out as Note [Attention layout] says; or, when `into` holds three
// tensors, written there: each of q's, k's, v's shape and dtype on their device, stride 1
// along hs, any other strides, not overlapping (the head views of a fused projection's
// gradient, which then needs no copies).
AttentionGrads causal_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& lse, const Tensor& grad_out, double scale,
                                         const Tensor& key_start = Tensor(), const AttentionGrads& into = {});

}  // namespace triad::ops
