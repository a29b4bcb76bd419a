// Neural-network kernels of tensor/ops.h: softmax, layer norm, RMS norm, the rotary
// embedding, embedding, cross-entropy, fused causal attention.
#include <cmath>
#include <optional>
#include <utility>

#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/ops_checks.h"

namespace triad::ops {

namespace {

// What f32 and 16-bit values compute in, and what statistics (norms' mean and rstd,
// cross-entropy's lse and loss) are kept in: f64 for f64, else f32.
DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t (a parameter or gradient beside `ref`) on ref's device, of ref's dtype or f32 beside a
// 16-bit ref.
void check_beside(const Tensor& t, const Tensor& ref, const char* op, const char* what) {
  TRIAD_CHECK(
      t.device() == ref.device() && (t.dtype() == ref.dtype() || (t.dtype() == DType::f32 && is_16bit(ref.dtype()))),
      op << ": " << what << " is " << t.str() << ", expected " << dtype_name(ref.dtype())
         << (is_16bit(ref.dtype()) ? " or f32" : "") << " on " << ref.device().str());
}

void check_like(const Tensor& t, const Tensor& ref, const char* op, const char* what) {
  TRIAD_CHECK(t.dtype() == ref.dtype() && t.device() == ref.device(), op << ": " << what << " is " << t.str()
                                                                         << ", expected " << dtype_name(ref.dtype())
                                                                         << " on " << ref.device().str());
}

}  // namespace

Tensor check_indices(const Tensor& idx, Device device, int64_t limit, std::optional<int64_t> ignore, bool wide,
                     const char* op) {
  TRIAD_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32,
              op << ": indices must be i64 or i32, got " << idx.str());
  TRIAD_CHECK(idx.device() == device, op << ": indices " << idx.str() << " must be on " << device.str()
                                         << ", where the values are (copy them with ops::to)");
  const Tensor c = contiguous(wide ? to(idx, DType::i64) : idx);
  if (!device.is_cpu()) return c;
  for (int64_t i = 0; i < c.numel(); ++i) {
    const int64_t v = c.dtype() == DType::i64 ? c.data<int64_t>()[i] : c.data<int32_t>()[i];
    TRIAD_CHECK((v >= 0 && v < limit) || (ignore && v == *ignore),
                op << ": index " << v << " at position " << i << " of indices " << shape_str(idx.shape())
                   << " out of range [0, " << limit << ")"
                   << (ignore ? " (or " + std::to_string(*ignore) + ")" : std::string()));
  }
  return c;
}

namespace {

// `rows` with its vocabulary resolved for a table of `count` rows (checked).
TableRows resolved(TableRows rows, int64_t count, const char* op) {
  if (rows.vocab < 0) rows.vocab = count;
  TRIAD_CHECK(rows.first >= 0, op << ": the table's rows start at " << rows.first << ", below 0");
  return rows;
}

// q, k, v of causal_attention: 4-D, one floating dtype and device, k and v alike, q's
// batch and head size those of k, k's heads dividing q's, no more queries than keys, hs >= 1.
void check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  const DType t = q.dtype();
  TRIAD_CHECK(t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16,
              op << ": expected f32, f64, bf16 or f16 tensors, got " << q.str());
  check_like(k, q, op, "k");
  check_like(v, q, op, "v");
  TRIAD_CHECK(q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape() && q.size(0) == k.size(0) &&
                  k.size(1) >= 1 && q.size(1) % k.size(1) == 0 && q.size(3) == k.size(3) && q.size(2) <= k.size(2) &&
                  q.size(3) >= 1,
              op << ": expected q (B, NH, Tq, hs) and k, v (B, NKV, Tk, hs) with NKV dividing NH, Tq <= Tk and hs "
                    ">= 1, got q "
                 << shape_str(q.shape()) << ", k " << shape_str(k.shape()) << ", v " << shape_str(v.shape()));
}

// t itself when the attention kernels can read it in place: stride 1 along hs and rows at
// least hs apart (a GEMM's leading dimension on the CPU); else a contiguous copy.
Tensor attention_operand(const Tensor& t) {
  return (t.size(3) == 1 || t.stride(3) == 1) && t.stride(2) >= t.size(3) ? t : contiguous(t);
}

// A new (B, NH, T, hs) tensor of `like`'s shape, dtype and device, laid out as
// (B, T, NH, hs) (Note [Attention layout]).
Tensor heads_by_position(const Tensor& like) {
  const Shape& s = like.shape();
  return transpose(Tensor::empty({s[0], s[2], s[1], s[3]}, like.dtype(), like.device()), 1, 2);
}


// Where causal_attention_backward writes a gradient of t (q, k or v): `given` when defined,
// checked, else a new tensor.
Tensor gradient_destination(const Tensor& given, const Tensor& t, const char* name) {
  if (!given.defined()) return heads_by_position(t);
  TRIAD_CHECK(given.shape() == t.shape() && given.dtype() == t.dtype() && given.device() == t.device() &&
                  (t.size(3) == 1 || given.stride(3) == 1),
              "causal_attention_backward: d" << name << " must be " << dtype_name(t.dtype()) << " "
                                             << shape_str(t.shape()) << " on " << t.device().str()
                                             << " with stride 1 along hs, got " << given.str());
  return given;
}

// key_start of causal_attention: undefined, or (B,) i64 on q's device (returned contiguous).
Tensor check_key_start(const Tensor& key_start, const Tensor& q, const char* op) {
  if (!key_start.defined()) return key_start;
  TRIAD_CHECK(key_start.dtype() == DType::i64 && key_start.shape() == Shape{q.size(0)} &&
                  key_start.device() == q.device(),
              op << ": key_start must be (" << q.size(0) << ",) i64 on " << q.device().str() << ", got "
                 << key_start.str());
  return contiguous(key_start);
}

}  // namespace

Tensor softmax(const Tensor& x, bool causal) {
  check_float(x, "softmax");
  TRIAD_CHECK(x.dim() >= (causal ? 2 : 1),
              "softmax: expected at least " << (causal ? 2 : 1) << " dimensions, got " << x.str());
  const int64_t n = x.size(-1);
  const int64_t tq = causal ? x.size(-2) : 1;
  TRIAD_CHECK(!causal || tq <= n, "softmax: causal mask needs queries <= keys, got " << shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).softmax(contiguous(x), y, n ? x.numel() / n : 0, n, causal, tq);
  return y;
}

Tensor softmax_backward(const Tensor& y, const Tensor& grad_y) {
  check_float(y, "softmax_backward");
  check_like(grad_y, y, "softmax_backward", "grad_y");
  TRIAD_CHECK(y.shape() == grad_y.shape(),
              "softmax_backward: shapes " << shape_str(y.shape()) << " and " << shape_str(grad_y.shape()) << " differ");
  const int64_t n = y.size(-1);
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  backend_for(y.device()).softmax_backward(contiguous(y), contiguous(grad_y), dx, n ? y.numel() / n : 0, n);
  return dx;
}

namespace {

// A LayerNorm's weight and bias beside x, each of shape (C,) for x's last dimension C.
void check_layer_norm_params(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  check_beside(weight, x, op, "weight");
  check_like(bias, weight, op, "bias");
  const int64_t c = x.size(-1);
  TRIAD_CHECK(weight.shape() == Shape{c} && bias.shape() == Shape{c},
              op << ": input " << shape_str(x.shape()) << " needs weight and bias of shape (" << c << ",), got "
                 << shape_str(weight.shape()) << " and " << shape_str(bias.shape()));
}

// An RMSNorm's weight beside x, of shape (C,) for x's last dimension C, and a positive eps.
void check_rms_norm_params(const Tensor& x, const Tensor& weight, double eps, const char* op) {
  check_beside(weight, x, op, "weight");
  TRIAD_CHECK(x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0),
              op << ": weight " << shape_str(weight.shape()) << " does not match the last dimension of x "
                 << shape_str(x.shape()));
  TRIAD_CHECK(eps > 0.0, op << ": eps must be positive, got " << eps);
}

}  // namespace

LayerNormOut layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_float(x, "layer_norm");
  check_layer_norm_params(x, weight, bias, "layer_norm");
  const int64_t c = x.size(-1);
  const int64_t rows = c ? x.numel() / c : 0;
  const DType stats = compute_dtype(x.dtype());
  LayerNormOut r{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty({rows}, stats, x.device()),
                 Tensor::empty({rows}, stats, x.device())};
  backend_for(x.device()).layer_norm(contiguous(x), contiguous(weight), contiguous(bias), eps, r.y, r.mean, r.rstd);
  return r;
}

namespace {

// A norm's input gradient's residual addend: of x's shape, beside grad_y, contiguous.
Tensor residual_grad(const Tensor& grad_residual, const Tensor& x, const Tensor& grad_y, const char* op) {
  if (!grad_residual.defined()) return grad_residual;
  check_beside(grad_residual, grad_y, op, "grad_residual");
  TRIAD_CHECK(grad_residual.shape() == x.shape(), op << ": grad_residual " << shape_str(grad_residual.shape())
                                                     << " differs from input " << shape_str(x.shape()));
  return contiguous(grad_residual);
}

// x and r of one shape, dtype and device: the two terms of a residual add.
void check_residual(const Tensor& x, const Tensor& r, const char* op) {
  check_float(x, op);
  check_like(r, x, op, "r");
  TRIAD_CHECK(x.shape() == r.shape(),
              op << ": x " << shape_str(x.shape()) << " and r " << shape_str(r.shape()) << " differ");
}

}  // namespace

AddLayerNormOut add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps) {
  check_residual(x, r, "add_layer_norm");
  check_layer_norm_params(x, weight, bias, "add_layer_norm");
  const int64_t c = x.size(-1);
  const int64_t rows = c ? x.numel() / c : 0;
  const DType stats = compute_dtype(x.dtype());
  AddLayerNormOut o{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), x.dtype(), x.device()),
                    Tensor::empty({rows}, stats, x.device()), Tensor::empty({rows}, stats, x.device())};
  backend_for(x.device())
      .add_layer_norm(contiguous(x), contiguous(r), contiguous(weight), contiguous(bias), eps, o.sum, o.y, o.mean,
                      o.rstd);
  return o;
}

AddRmsNormOut add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps) {
  check_residual(x, r, "add_rms_norm");
  check_rms_norm_params(x, weight, eps, "add_rms_norm");
  const int64_t c = x.size(-1), rows = c ? x.numel() / c : 0;
  AddRmsNormOut o{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), x.dtype(), x.device()),
                  Tensor::empty({rows}, compute_dtype(x.dtype()), x.device())};
  backend_for(x.device()).add_rms_norm(contiguous(x), contiguous(r), contiguous(weight), eps, o.sum, o.y, o.rstd);
  return o;
}

namespace {

// ops::rotary and its backward (x: grad_y): x viewed as (B, n, T, D), the leading
// dimensions merged into B (reshape: a view where the strides allow it), and the tables as
// (B or 1, T, D), contiguous.
Tensor rotary_op(const Tensor& x, const Tensor& cos, const Tensor& sin, bool backward, const char* op) {
  check_float(x, op);
  TRIAD_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0,
              op << ": expected x (..., T, D) with D even, got " << shape_str(x.shape()));
  const int64_t T = x.size(-2), D = x.size(-1), n = x.dim() >= 3 ? x.size(-3) : 1;
  int64_t B = 1;
  for (int d = 0; d + 3 < x.dim(); ++d) B *= x.size(d);
  const bool per_row = x.dim() == 4 && cos.shape() == Shape{B, 1, T, D};
  TRIAD_CHECK((cos.shape() == Shape{T, D} || per_row) && sin.shape() == cos.shape(),
              op << ": tables " << shape_str(cos.shape()) << " and " << shape_str(sin.shape()) << " do not match x "
                 << shape_str(x.shape()) << " (expected (T, D), or (B, 1, T, D) for x (B, n, T, D))");
  check_beside(cos, x, op, "cos");
  check_beside(sin, x, op, "sin");
  const int64_t table_rows = per_row ? B : 1;
  // Heads of a (B, T, n D) projection (x a (B, n, T, D) view, heads adjacent in memory) give
  // y laid out the same way, so that y's (B, T, n D) view, which the attention's gradient
  // flows back through, is a view (Note [Attention layout]); else y is contiguous.
  const bool by_position = x.dim() == 4 && x.stride(1) < x.stride(2);
  const Tensor y = by_position ? heads_by_position(x) : Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device())
      .rotary(reshape(x, {B, n, T, D}), reshape(contiguous(cos), {table_rows, T, D}),
              reshape(contiguous(sin), {table_rows, T, D}), reshape(y, {B, n, T, D}), backward);
  return y;
}

}  // namespace

Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin) { return rotary_op(x, cos, sin, false, "rotary"); }

Tensor rotary_backward(const Tensor& grad_y, const Tensor& cos, const Tensor& sin) {
  return rotary_op(grad_y, cos, sin, true, "rotary_backward");
}

LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& grad_residual) {
  check_float(x, "layer_norm_backward");
  check_beside(grad_y, x, "layer_norm_backward", "grad_y");
  check_beside(weight, x, "layer_norm_backward", "weight");
  TRIAD_CHECK(grad_y.shape() == x.shape(), "layer_norm_backward: grad_y " << shape_str(grad_y.shape())
                                                                          << " differs from input "
                                                                          << shape_str(x.shape()));
  const int64_t c = x.size(-1);
  LayerNormGrads g{Tensor::empty(x.shape(), grad_y.dtype(), x.device()), Tensor::empty({c}, weight.dtype(), x.device()),
                   Tensor::empty({c}, weight.dtype(), x.device())};
  backend_for(x.device())
      .layer_norm_backward(contiguous(grad_y), contiguous(x), contiguous(weight), mean, rstd, g.dx, g.dweight, g.dbias,
                           residual_grad(grad_residual, x, grad_y, "layer_norm_backward"));
  return g;
}

RmsNormOut rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_float(x, "rms_norm");
  check_rms_norm_params(x, weight, eps, "rms_norm");
  const int64_t c = x.size(-1), rows = c ? x.numel() / c : 0;
  RmsNormOut r{Tensor::empty(x.shape(), x.dtype(), x.device()),
               Tensor::empty({rows}, compute_dtype(x.dtype()), x.device())};
  backend_for(x.device()).rms_norm(contiguous(x), contiguous(weight), eps, r.y, r.rstd);
  return r;
}

RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               const Tensor& grad_residual) {
  check_float(x, "rms_norm_backward");
  check_beside(grad_y, x, "rms_norm_backward", "grad_y");
  check_beside(weight, x, "rms_norm_backward", "weight");
  const int64_t c = x.size(-1), rows = c ? x.numel() / c : 0;
  TRIAD_CHECK(grad_y.shape() == x.shape() && weight.shape() == Shape{c} && rstd.shape() == Shape{rows} &&
                  rstd.dtype() == compute_dtype(x.dtype()) && rstd.device() == x.device(),
              "rms_norm_backward: for x " << shape_str(x.shape()) << " expected grad_y of its shape, weight (" << c
                                          << ",) and rstd (" << rows << ",) in " << dtype_name(compute_dtype(x.dtype()))
                                          << ", got grad_y " << shape_str(grad_y.shape()) << ", weight "
                                          << shape_str(weight.shape()) << ", rstd " << rstd.str());
  RmsNormGrads g{Tensor::empty(x.shape(), grad_y.dtype(), x.device()), Tensor::empty({c}, weight.dtype(), x.device())};
  backend_for(x.device())
      .rms_norm_backward(contiguous(grad_y), contiguous(x), contiguous(weight), contiguous(rstd), g.dx, g.dweight,
                         residual_grad(grad_residual, x, grad_y, "rms_norm_backward"));
  return g;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, TableRows rows) {
  check_float(weight, "embedding");
  TRIAD_CHECK(weight.dim() == 2, "embedding: weight must be (num_embeddings, dim), got " << shape_str(weight.shape()));
  rows = resolved(rows, weight.size(0), "embedding");
  const Tensor idx = check_indices(indices, weight.device(), rows.vocab, std::nullopt, false, "embedding");
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.dtype(), weight.device());
  backend_for(weight.device()).embedding(contiguous(weight), idx, out, rows);
  return out;
}

Tensor embedding_backward(const Tensor& grad_y, const Tensor& indices, int64_t num_embeddings, TableRows rows) {
  check_float(grad_y, "embedding_backward");
  TRIAD_CHECK(
      grad_y.dim() == indices.dim() + 1 && Shape(grad_y.shape().begin(), grad_y.shape().end() - 1) == indices.shape(),
      "embedding_backward: grad " << shape_str(grad_y.shape()) << " does not match indices "
                                  << shape_str(indices.shape()));
  rows = resolved(rows, num_embeddings, "embedding_backward");
  const Tensor idx = check_indices(indices, grad_y.device(), rows.vocab, std::nullopt, false, "embedding_backward");
  Tensor gw = Tensor::zeros({num_embeddings, grad_y.size(-1)}, grad_y.dtype(), grad_y.device());
  backend_for(grad_y.device()).embedding_backward(contiguous(grad_y), idx, gw, rows);
  return gw;
}

// The classes of logits (N, W): `classes`, or W when -1.
int64_t classes_of(const Tensor& logits, int64_t classes, const char* op) {
  if (classes < 0) return logits.size(1);
  TRIAD_CHECK(classes <= logits.size(1), op << ": " << classes << " classes, but the logits have only "
                                             << logits.size(1) << " columns");
  return classes;
}

CrossEntropyOut cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, int64_t classes) {
  check_float(logits, "cross_entropy");
  TRIAD_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "cross_entropy: expected logits (N, V) and targets (N,), got " << shape_str(logits.shape()) << " and "
                                                                             << shape_str(targets.shape()));
  const int64_t v = classes_of(logits, classes, "cross_entropy");
  const Tensor t = check_indices(targets, logits.device(), v, ignore_index, true, "cross_entropy");
  const DType stats = compute_dtype(logits.dtype());
  CrossEntropyOut r{Tensor::empty({}, stats, logits.device()), Tensor::empty({logits.size(0)}, stats, logits.device()),
                    Tensor::empty({}, DType::i64, logits.device())};
  backend_for(logits.device()).cross_entropy(contiguous(logits), t, r.lse, r.loss, r.count, ignore_index, v);
  return r;
}

void sample_tokens_(const Tensor& logits, int64_t vocab, const TokenSampling& s, const Tensor& done,
                    const Tensor& tokens, const Tensor& logprobs, const Tensor& mask, const Tensor& step) {
  TRIAD_CHECK(logits.dim() == 2 && logits.dtype() == DType::f32 && logits.stride(1) == 1,
              "sample_tokens: expected f32 logits (B, W) with stride 1 along W, got " << logits.str());
  const int64_t B = logits.size(0);
  TRIAD_CHECK(vocab > 0 && vocab <= logits.size(1),
              "sample_tokens: vocab must be in [1, " << logits.size(1) << "], got " << vocab);
  TRIAD_CHECK(s.temperature >= 0.0 && std::isfinite(s.temperature) && s.top_k >= 0 && s.top_p > 0.0 && s.top_p <= 1.0,
              "sample_tokens: expected temperature >= 0, top_k >= 0 and top_p in (0, 1], got " << s.temperature << ", "
                                                                                               << s.top_k << ", " << s.top_p);
  TRIAD_CHECK(s.pad_token >= 0 && s.pad_token < vocab && s.first_sample >= 0 && s.step >= 0,
              "sample_tokens: pad_token " << s.pad_token << " outside [0, " << vocab << "), or a negative first_sample "
                                          << s.first_sample << " or step " << s.step);
  const std::pair<const Tensor*, DType> rows[] = {
      {&done, DType::f32}, {&tokens, DType::i64}, {&logprobs, DType::f32}, {&mask, DType::f32}};
  for (const auto& [t, dtype] : rows)
    TRIAD_CHECK(t->shape() == Shape{B} && t->dtype() == dtype && t->is_contiguous() && t->device() == logits.device(),
                "sample_tokens: expected (" << B << ") " << dtype_name(dtype) << " on " << logits.device().str()
                                            << ", got " << t->str());
  if (step.defined()) check_device_position(step, logits.device(), "sample_tokens", "step");
  backend_for(logits.device()).sample_tokens(logits, vocab, s, done, tokens, logprobs, mask, step);
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                              const Tensor& count, int64_t ignore_index, int64_t classes) {
  check_float(logits, "cross_entropy_backward");
  TRIAD_CHECK(lse.dtype() == compute_dtype(logits.dtype()) && lse.device() == logits.device(),
              "cross_entropy_backward: lse is " << lse.str() << ", expected "
                                                << dtype_name(compute_dtype(logits.dtype())) << " on "
                                                << logits.device().str());
  TRIAD_CHECK(grad_loss.numel() == 1 && grad_loss.device() == logits.device() && count.numel() == 1 &&
                  count.dtype() == DType::i64 && count.device() == logits.device(),
              "cross_entropy_backward: expected one grad_loss value and an i64 count on "
                  << logits.device().str() << ", got " << grad_loss.str() << " and " << count.str());
  TRIAD_CHECK(logits.dim() == 2 && targets.shape() == Shape{logits.size(0)} && lse.shape() == Shape{logits.size(0)},
              "cross_entropy_backward: expected logits (N, V), targets (N,) and lse (N,), got "
                  << shape_str(logits.shape()) << ", " << shape_str(targets.shape()) << " and "
                  << shape_str(lse.shape()));
  const int64_t v = classes_of(logits, classes, "cross_entropy_backward");
  const Tensor t = check_indices(targets, logits.device(), v, ignore_index, true, "cross_entropy_backward");
  Tensor g = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  backend_for(logits.device())
      .cross_entropy_backward(contiguous(logits), t, lse, contiguous(to(grad_loss, lse.dtype())), count, ignore_index,
                              v, g);
  return g;
}

namespace {

// logits (n, W) of a float dtype, contiguous, with `classes` <= W class columns from `first`
// of a vocabulary of `vocab`; stats (n,) of its compute dtype on its device, contiguous.
void check_classifier_chunk(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t vocab,
                            const std::vector<const Tensor*>& stats, const char* op) {
  check_float(logits, op);
  TRIAD_CHECK(logits.dim() == 2 && logits.is_contiguous() && targets.shape() == Shape{logits.size(0)},
              op << ": expected contiguous logits (n, W) and targets (n,), got " << logits.str() << " and "
                 << shape_str(targets.shape()));
  TRIAD_CHECK(classes >= 0 && classes <= logits.size(1) && first >= 0 && (classes == 0 || first + classes <= vocab),
              op << ": classes [" << first << ", " << first + classes << ") must lie in the vocabulary [0, " << vocab
                 << ") and number at most the logits' " << logits.size(1) << " columns");
  for (const Tensor* t : stats)
    TRIAD_CHECK(t->shape() == Shape{logits.size(0)} && t->dtype() == compute_dtype(logits.dtype()) &&
                    t->device() == logits.device() && t->is_contiguous(),
                op << ": expected contiguous (" << logits.size(0) << ",) " << dtype_name(compute_dtype(logits.dtype()))
                   << " stats on " << logits.device().str() << ", got " << t->str());
}

}  // namespace

void classifier_rows_(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t vocab,
                      int64_t ignore_index, const Tensor& lse, const Tensor& target_logit) {
  check_classifier_chunk(logits, targets, first, classes, vocab, {&lse, &target_logit}, "classifier_rows");
  const Tensor t = check_indices(targets, logits.device(), vocab, ignore_index, true, "classifier_rows");
  backend_for(logits.device()).classifier_rows(logits, t, first, classes, vocab, ignore_index, lse, target_logit);
}

CrossEntropyOut classifier_loss(const Tensor& lse, const Tensor& target_logit, const Tensor& targets, int64_t vocab,
                                int64_t ignore_index) {
  TRIAD_CHECK(lse.dim() == 1 && (lse.dtype() == DType::f32 || lse.dtype() == DType::f64) && lse.is_contiguous() &&
                  target_logit.shape() == lse.shape() && target_logit.dtype() == lse.dtype() &&
                  target_logit.is_contiguous() && target_logit.device() == lse.device() &&
                  targets.shape() == lse.shape(),
              "classifier_loss: expected contiguous lse and target_logit (N,) of one of f32, f64 and targets (N,), got "
                  << lse.str() << ", " << target_logit.str() << " and " << shape_str(targets.shape()));
  const Tensor t = check_indices(targets, lse.device(), vocab, ignore_index, true, "classifier_loss");
  CrossEntropyOut r{Tensor::empty({}, lse.dtype(), lse.device()), lse, Tensor::empty({}, DType::i64, lse.device())};
  backend_for(lse.device()).classifier_loss(lse, target_logit, t, vocab, ignore_index, r.loss, r.count);
  return r;
}

void classifier_grad_(const Tensor& logits, const Tensor& targets, int64_t first, int64_t classes, int64_t vocab,
                      int64_t ignore_index, const Tensor& lse, const Tensor& grad_loss, const Tensor& count) {
  check_classifier_chunk(logits, targets, first, classes, vocab, {&lse}, "classifier_grad");
  TRIAD_CHECK(grad_loss.numel() == 1 && grad_loss.device() == logits.device() && count.numel() == 1 &&
                  count.dtype() == DType::i64 && count.device() == logits.device(),
              "classifier_grad: expected one grad_loss value and an i64 count on "
                  << logits.device().str() << ", got " << grad_loss.str() << " and " << count.str());
  const Tensor t = check_indices(targets, logits.device(), vocab, ignore_index, true, "classifier_grad");
  backend_for(logits.device())
      .classifier_grad(logits, t, first, classes, vocab, ignore_index, lse, contiguous(to(grad_loss, lse.dtype())),
                       count);
}

AttentionOut causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                              const Tensor& key_start, const Tensor& cached) {
  check_attention(q, k, v, "causal_attention");
  const Tensor first = check_key_start(key_start, q, "causal_attention");
  if (cached.defined()) check_device_position(cached, q.device(), "causal_attention", "cached");
  const DType lse_dtype = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  AttentionOut r{heads_by_position(q), Tensor::empty({q.size(0), q.size(1), q.size(2)}, lse_dtype, q.device())};
  if (q.numel() == 0) return r;
  backend_for(q.device())
      .attention(attention_operand(q), attention_operand(k), attention_operand(v), r.out, r.lse, scale, first, cached);
  return r;
}

AttentionGrads causal_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& lse, const Tensor& grad_out, double scale,
                                         const Tensor& key_start, const AttentionGrads& into) {
  check_attention(q, k, v, "causal_attention_backward");
  const Tensor first = check_key_start(key_start, q, "causal_attention_backward");
  check_like(out, q, "causal_attention_backward", "out");
  check_like(grad_out, q, "causal_attention_backward", "grad_out");
  const DType lse_dtype = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Shape lse_shape = {q.size(0), q.size(1), q.size(2)};
  TRIAD_CHECK(out.shape() == q.shape() && grad_out.shape() == q.shape() && lse.shape() == lse_shape &&
                  lse.dtype() == lse_dtype && lse.device() == q.device(),
              "causal_attention_backward: for q "
                  << shape_str(q.shape()) << " expected out and grad_out of that shape "
                  << "and lse " << shape_str(lse_shape) << " in " << dtype_name(lse_dtype) << ", got out "
                  << shape_str(out.shape()) << ", grad_out " << shape_str(grad_out.shape()) << ", lse " << lse.str());
  AttentionGrads g{gradient_destination(into.dq, q, "q"), gradient_destination(into.dk, k, "k"),
                   gradient_destination(into.dv, v, "v")};
  if (q.numel() == 0) {  // no queries: keys and values had no effect
    zero_(g.dk);
    zero_(g.dv);
    return g;
  }
  backend_for(q.device())
      .attention_backward(attention_operand(q), attention_operand(k), attention_operand(v), attention_operand(out),
                          contiguous(lse), attention_operand(grad_out), g.dq, g.dk, g.dv, scale, first);
  return g;
}

}  // namespace triad::ops
