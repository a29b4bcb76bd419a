// The differentiable operations a model is written with (namespace triad). Each computes
// with the raw op of the same name in tensor/ops.h (or, where it has none, with raw ops:
// see "composed") and, when an input requires grad and grad mode is on, records its
// backward on the tape. Views share storage as their raw counterparts do.
#pragma once

#include "tensor/ops.h"

namespace triad {

// ---- views ----
Tensor view(const Tensor& t, const Shape& shape);
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor contiguous(const Tensor& t);
// Joins tensors along `dim` (all other dimensions equal).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// A copy in another floating dtype; the gradient flows back in the input's dtype.
Tensor to(const Tensor& t, DType dtype);
// t in f32 when it is stored in bf16/f16, t itself otherwise: for what must compute past
// one op in f32 (a router's softmax); the gradient flows back in t's dtype.
Tensor compute_dtype(const Tensor& t);

// ---- elementwise (broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor gelu(const Tensor& x);  // tanh approximation
// SiLU (swish): x sigmoid(x), the gate of a SwiGLU MLP; sigmoid is computed as
// (1 + tanh(x/2)) / 2, finite for every x.
Tensor silu(const Tensor& x);
// silu(a) * b fused (ops::swiglu): one kernel forward and one backward; a 16-bit result is
// rounded once where the composition rounds silu(a) too.
Tensor swiglu(const Tensor& a, const Tensor& b);
// Inverted dropout with probability p; identity when !training or p == 0. The mask is
// drawn from `gen` and replayed exactly in the backward.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());

// ---- composed, with PyTorch's gradients at their kinks ----
// No raw op of these names: each computes with raw ops (any device, f32 or f64) and
// records its own backward, so that the gradients at kinks follow PyTorch's conventions,
// which reference data exported from PyTorch relies on (tests/reference/rlhf_reference.py):
//   - log_sigmoid'(x) = sigmoid(-x) everywhere (at 0: 1/2);
//   - clamp passes the gradient where lo <= x <= hi (both ends included), as torch.clamp;
//   - maximum gives the gradient to the larger input and half to each on a tie, as
//     torch.maximum.
// log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)): no overflow for any finite x.
Tensor log_sigmoid(const Tensor& x);
// x clamped elementwise into [lo, hi]; lo and hi broadcast to x's shape and are constants
// (no gradient flows to them). lo <= hi is the caller's to keep.
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi);
Tensor clamp(const Tensor& x, double lo, double hi);
// The elementwise maximum of a and b (same shape).
Tensor maximum(const Tensor& a, const Tensor& b);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

// ---- reductions ----
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
// sum(x * mask) / sum(mask) over all elements: mask has x's shape, holds weights (0/1 for a
// token mask) and is a constant. Throws Error naming `what` when the mask's shape differs
// or its sum is not positive (a batch with no token to learn from). `tokens`: sum(mask) when
// the caller knows it (then nothing is read from the device, which on a GPU waits for it);
// 0: sum(mask) is read.
Tensor masked_mean(const Tensor& x, const Tensor& mask, const char* what, double tokens = 0);
// sum(mask), read from the device; Error naming `what` unless it is positive.
double mask_tokens(const Tensor& mask, const char* what);
// mask in x's dtype and on x's device, after checking that its shape is x's (Error naming
// `what` otherwise). No gradient history.
Tensor mask_like(const Tensor& mask, const Tensor& x, const char* what);

// ---- linear algebra ----
// Operands of one dtype; bf16/f16 accumulate in f32 and round once (Note [16-bit
// activations]). linear narrows an input of another dtype to a 16-bit weight's.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias)) fused (ops::linear_gelu): keeps the pre-activation for the
// backward, which fuses GELU's backward with the bias gradient (ops::gelu_bias_backward);
// a 16-bit result is GELU of the unrounded sum, rounded once. The weight's gradients wait
// in the split-backward queue as linear's do (Note [Split backward]).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Linear layers side by side (an MoE layer's experts, nn/moe_experts.h): x (G, rows, in),
// G weights (out, in) and none or G biases (out) -> (G, rows, out), group g
// linear(x[g], weights[g], biases[g]), or with `gelu` linear_gelu's. Each product (forward,
// input gradient, weights' gradients) is one grouped GEMM over the groups
// (ops::grouped_matmul_); the weights' gradients are added into their .grad in place where
// linear's would be, and wait in the split-backward queue as linear's do (Note [Split
// backward]; the biases' go on at once). The weights need not share a buffer: each keeps
// its own storage and gradient. On the CPU group g is linear(x[g], ...) bit for bit,
// forward and backward.
Tensor grouped_linear(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases = {},
                      bool gelu = false);
// The same over groups of their own sizes (a dropless MoE layer's experts, each on the rows
// it received): x (sum rows, in), group g the rows[g] rows after those of the groups
// before it, any of them 0 -> (sum rows, out). Each group is linear(its rows, ...) bit for
// bit on the CPU, forward and backward; a group of no rows gets a zero weight gradient.
Tensor grouped_linear(const Tensor& x, const std::vector<int64_t>& rows, const std::vector<Tensor>& weights,
                      const std::vector<Tensor>& biases = {}, bool gelu = false);

// ---- neural-network functions ----
// Every function here keeps its input's dtype (Note [16-bit activations] in functions.cpp):
// a bf16/f16 embedding table gives 16-bit activations all the way to cross_entropy, whose
// loss is f32; parameters' gradients come back in their dtype.
Tensor softmax(const Tensor& x, bool causal = false);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Root-mean-square normalisation over the last dimension C (Llama's RMSNorm):
// y = x / sqrt(mean(x^2) + eps) * weight, weight (C,), fused (ops::rms_norm). Computed in
// f32 (f64 for f64 x) whatever the dtypes x and weight are stored in; y and the gradients
// come back in the dtypes of x and weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);
// A pre-norm block's residual add fused into its norm: sum = x + r (the next residual
// stream) and y = the norm of sum, bit for bit add then layer_norm / rms_norm
// (ops::add_layer_norm). The backward adds the norm's input gradient into the gradient
// sum receives along the residual stream in the norm's own kernel.
struct AddNorm {
  Tensor sum, y;
};
AddNorm add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
AddNorm add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps = 1e-5);
// Rotary position embedding in the rotate_half convention (GPT-NeoX, Hugging Face Llama):
// x (..., T, D), D even, and tables cos, sin (T, D) (nn/rotary.h), or (B, 1, T, D) for
// x (B, n, T, D) (each row's own positions) ->
// x cos + rotate_half(x) sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]): each pair
// of features (i, i + D/2) turns by its position's angle. Fused (ops::rotary): one kernel
// forward and one backward, x read through its strides, a 16-bit result rounded once. The
// tables take no gradient.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);
// ops::embedding: the indices of `rows` (TableRows) off the table's rows read zeros and
// pass no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices, TableRows rows = {});
// Mean cross-entropy of logits (..., V) against targets (...), skipping ignore_index.
// classes: the first `classes` columns of logits' last dimension are the classes, the rest
// padding (ops::cross_entropy); -1: all of them.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100, int64_t classes = -1);
// softmax(scale q k^T, causal) v for q (B, NH, Tq, hs) and k, v (B, NH, Tk, hs), Tq <= Tk,
// fused: the probabilities are never stored, the backward recomputes them
// (ops::causal_attention). bf16/f16 inputs get gradients in their dtype; they are
// computed on in f32 on the CPU and on tensor cores (f32 accumulation) on a GPU.
// key_start (B,) i64: each row's first key (ops::causal_attention); a pad query outputs 0
// and passes no gradient.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                        const Tensor& key_start = Tensor());
// The same over the heads of a fused projection qkv (B, T, 3C): q, k and v are its three
// C-wide parts, each split into n_head heads of C / n_head features, read in place; the
// output is (B, n_head, T, hs) (Note [Attention layout] in tensor/ops.h). Its gradient is
// one (B, T, 3C) tensor that the attention's backward writes dq, dk and dv into, in place
// (where three views' gradients would each be a zeroed (B, T, 3C) tensor, summed after).
Tensor causal_attention_qkv(const Tensor& qkv, int64_t n_head, double scale, const Tensor& key_start = Tensor());

}  // namespace triad
