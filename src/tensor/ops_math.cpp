// Elementwise, reduction and linear-algebra ops of tensor/ops.h: argument checks, result
// allocation, one backend call each.
#include <cmath>
#include <cstring>

#include "tensor/backend.h"
#include "tensor/loss_scale_math.h"
#include "tensor/ops.h"
#include "tensor/ops_checks.h"
#include "tensor/optimizer_math.h"
#include "tensor/optimizer_ops.h"

namespace triad::ops {

void check_float(const Tensor& t, const char* op) {
  TRIAD_CHECK(is_floating(t.dtype()), op << ": expected a floating tensor (f32, f64, bf16 or f16), got " << t.str());
}

namespace {

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  TRIAD_CHECK(a.dtype() == b.dtype(), op << ": dtypes differ: " << a.str() << " and " << b.str());
  TRIAD_CHECK(a.device() == b.device(), op << ": devices differ: " << a.str() << " and " << b.str());
}

// The dtype of an elementwise result of floating a and b on one device: their dtype when
// they share one; an f32 operand beside a 16-bit one gives the 16-bit dtype (Note [16-bit
// activations]: a 16-bit activation meeting an f32 table stays 16-bit). f64 does not mix.
DType result_dtype(const Tensor& a, const Tensor& b, const char* op) {
  check_float(a, op);
  check_float(b, op);
  TRIAD_CHECK(a.device() == b.device(), op << ": devices differ: " << a.str() << " and " << b.str());
  if (a.dtype() == b.dtype()) return a.dtype();
  TRIAD_CHECK((a.dtype() == DType::f32 && is_16bit(b.dtype())) || (b.dtype() == DType::f32 && is_16bit(a.dtype())),
              op << ": dtypes " << dtype_name(a.dtype()) << " and " << dtype_name(b.dtype())
                 << " do not mix (f32 mixes with one of bf16 and f16; convert with ops::to): " << a.str() << " and "
                 << b.str());
  return is_16bit(a.dtype()) ? a.dtype() : b.dtype();
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  const DType dtype = result_dtype(a, b, name);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, dtype, a.device());
  backend_for(a.device()).binary(op, expand(a, shape), expand(b, shape), out);
  return out;
}

Tensor unary(UnaryOp op, const Tensor& a, double scalar, const char* name) {
  check_float(a, name);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  backend_for(a.device()).unary(op, a, out, scalar);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b, "mul"); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b, "div"); }
Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  TRIAD_CHECK(y.shape() == grad_y.shape(),
              "relu_backward: shapes " << shape_str(y.shape()) << " and " << shape_str(grad_y.shape()) << " differ");
  return binary(BinaryOp::relu_backward, y, grad_y, "relu_backward");
}
Tensor add(const Tensor& a, double b) { return unary(UnaryOp::add_scalar, a, b, "add"); }
Tensor mul(const Tensor& a, double b) { return unary(UnaryOp::scale, a, b, "mul"); }
Tensor neg(const Tensor& a) { return unary(UnaryOp::neg, a, 0, "neg"); }
Tensor exp(const Tensor& a) { return unary(UnaryOp::exp, a, 0, "exp"); }
Tensor log(const Tensor& a) { return unary(UnaryOp::log, a, 0, "log"); }
Tensor sqrt(const Tensor& a) { return unary(UnaryOp::sqrt, a, 0, "sqrt"); }
Tensor tanh(const Tensor& a) { return unary(UnaryOp::tanh, a, 0, "tanh"); }
Tensor relu(const Tensor& a) { return unary(UnaryOp::relu, a, 0, "relu"); }
Tensor pow(const Tensor& a, double exponent) { return unary(UnaryOp::pow, a, exponent, "pow"); }
Tensor gelu(const Tensor& x) { return unary(UnaryOp::gelu, x, 0, "gelu"); }
Tensor silu(const Tensor& x) { return unary(UnaryOp::silu, x, 0, "silu"); }
Tensor silu_backward(const Tensor& x, const Tensor& grad_y) {
  TRIAD_CHECK(x.shape() == grad_y.shape(),
              "silu_backward: shapes " << shape_str(x.shape()) << " and " << shape_str(grad_y.shape()) << " differ");
  return binary(BinaryOp::silu_backward, x, grad_y, "silu_backward");
}

Tensor swiglu(const Tensor& a, const Tensor& b) {
  check_float(a, "swiglu");
  check_same(a, b, "swiglu");
  TRIAD_CHECK(a.shape() == b.shape(),
              "swiglu: shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape()) << " differ");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  backend_for(a.device()).swiglu(contiguous(a), contiguous(b), out);
  return out;
}

SwigluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& grad_y) {
  check_float(a, "swiglu_backward");
  check_same(a, b, "swiglu_backward");
  check_same(a, grad_y, "swiglu_backward");
  TRIAD_CHECK(a.shape() == b.shape() && a.shape() == grad_y.shape(),
              "swiglu_backward: shapes " << shape_str(a.shape()) << ", " << shape_str(b.shape()) << " and "
                                         << shape_str(grad_y.shape()) << " differ");
  SwigluGrads g{Tensor::empty(a.shape(), a.dtype(), a.device()), Tensor::empty(a.shape(), a.dtype(), a.device())};
  backend_for(a.device()).swiglu_backward(contiguous(a), contiguous(b), contiguous(grad_y), g.da, g.db);
  return g;
}

void add_(const Tensor& dst, const Tensor& src, double alpha) {
  result_dtype(dst, src, "add_");
  TRIAD_CHECK(broadcast_shapes(dst.shape(), src.shape(), "add_") == dst.shape(),
              "add_: source of shape " << shape_str(src.shape()) << " does not broadcast to the destination's "
                                       << shape_str(dst.shape()));
  backend_for(dst.device()).axpy(dst, expand(src, dst.shape()), alpha);
}

void mul_(const Tensor& dst, double factor) {
  check_float(dst, "mul_");
  backend_for(dst.device()).unary(UnaryOp::scale, dst, dst, factor);
}

Tensor gelu_backward(const Tensor& x, const Tensor& grad_y) {
  const DType dtype = result_dtype(x, grad_y, "gelu_backward");
  TRIAD_CHECK(x.shape() == grad_y.shape(),
              "gelu_backward: shapes " << shape_str(x.shape()) << " and " << shape_str(grad_y.shape()) << " differ");
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  backend_for(x.device()).gelu_backward(contiguous(x), contiguous(grad_y), out);
  return out;
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t first) {
  check_float(x, "dropout");
  TRIAD_CHECK(p >= 0.0 && p < 1.0, "dropout: probability must be in [0, 1), got " << p);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).dropout(contiguous(x), out, p, seed, first);
  return out;
}

// ---- reductions ----

Tensor sum(const Tensor& a) {
  check_float(a, "sum");
  // Summed where a is, in f64, rounded once to a's dtype: the host waits for nothing.
  Tensor out = Tensor::empty({}, a.dtype(), a.device());
  backend_for(a.device()).sum_all_to(contiguous(a), out);
  return out;
}

namespace {

Tensor reduce_dim(const Tensor& a, int64_t dim, bool keepdim, bool is_max, const char* op) {
  check_float(a, op);
  const int d = normalize_dim(dim, a.dim(), op);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= a.shape()[i];
  for (int i = d + 1; i < a.dim(); ++i) inner *= a.shape()[i];
  const int64_t n = a.shape()[d];
  TRIAD_CHECK(!is_max || n > 0, op << ": reducing an empty dimension " << d);
  Shape shape = a.shape();
  shape[d] = 1;
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  Backend& be = backend_for(a.device());
  if (is_max)
    be.max_dim(contiguous(a), out, outer, n, inner);
  else
    be.sum_dim(contiguous(a), out, outer, n, inner);
  return keepdim ? out : squeeze(out, d);
}

}  // namespace

Tensor sum(const Tensor& a, int64_t dim, bool keepdim) { return reduce_dim(a, dim, keepdim, false, "sum"); }
Tensor max(const Tensor& a, int64_t dim, bool keepdim) { return reduce_dim(a, dim, keepdim, true, "max"); }

Tensor mean(const Tensor& a) {
  TRIAD_CHECK(a.numel() > 0, "mean: empty tensor");
  return mul(sum(a), 1.0 / double(a.numel()));
}

Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  const int d = normalize_dim(dim, a.dim(), "mean");
  TRIAD_CHECK(a.shape()[d] > 0, "mean: empty dimension " << d);
  Tensor s = sum(a, d, keepdim);
  mul_(s, 1.0 / double(a.shape()[d]));
  return s;
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  TRIAD_CHECK(broadcast_shapes(shape, a.shape(), "sum_to") == a.shape(),
              "sum_to: " << shape_str(shape) << " does not broadcast to " << shape_str(a.shape()));
  Tensor r = a;
  const int lead = a.dim() - int(shape.size());
  if (lead > 0) {  // the leading dimensions as one, summed in one op (a 16-bit result rounds once)
    Shape rows{1};
    for (int i = 0; i < lead; ++i) rows[0] *= a.shape()[i];
    rows.insert(rows.end(), a.shape().begin() + lead, a.shape().end());
    r = sum(reshape(a, rows), 0, false);
  }
  for (int i = 0; i < int(shape.size()); ++i)
    if (shape[i] == 1 && r.shape()[i] != 1) r = sum(r, i, true);
  return r;
}

double sum_squares(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return 0.0;
  std::vector<Tensor> c;
  c.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    check_float(t, "sum_squares");
    TRIAD_CHECK(t.device() == tensors[0].device(), "sum_squares: tensors on " << tensors[0].device().str() << " and "
                                                                              << t.device().str()
                                                                              << "; they must share one device");
    c.push_back(contiguous(t));
  }
  return backend_for(c[0].device()).sum_squares(c);
}

double max_abs(const Tensor& a) {
  check_float(a, "max_abs");
  return backend_for(a.device()).max_abs(contiguous(a));
}

bool all_finite(const Tensor& a) {
  check_float(a, "all_finite");
  return backend_for(a.device()).all_finite(contiguous(a));
}

// ---- linear algebra ----

namespace {

// The shape of matmul(a, b, trans_a, trans_b), checked, with its batch, M, N and K.
struct MatmulShape {
  Shape out;
  int64_t batch, m, n, k;
};
MatmulShape matmul_shape(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const char* op) {
  check_float(a, op);
  check_same(a, b, op);
  TRIAD_CHECK(a.dim() >= 2 && b.dim() >= 2, op << ": expected operands with at least 2 dimensions, got "
                                               << shape_str(a.shape()) << " and " << shape_str(b.shape()));
  const int64_t m = trans_a ? a.size(-1) : a.size(-2), ka = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2), n = trans_b ? b.size(-2) : b.size(-1);
  TRIAD_CHECK(ka == kb, op << ": inner dimensions differ: " << shape_str(a.shape()) << (trans_a ? "^T" : "") << " @ "
                           << shape_str(b.shape()) << (trans_b ? "^T" : ""));
  const Shape batch_shape(a.shape().begin(), a.shape().end() - 2);
  const Shape b_batch(b.shape().begin(), b.shape().end() - 2);
  TRIAD_CHECK(b.dim() == 2 || b_batch == batch_shape,
              op << ": batch dimensions differ: " << shape_str(a.shape()) << " @ " << shape_str(b.shape()));
  Shape out = batch_shape;
  out.push_back(m);
  out.push_back(n);
  return {out, numel(batch_shape), m, n, ka};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const MatmulShape s = matmul_shape(a, b, trans_a, trans_b, "matmul");
  Tensor out = Tensor::empty(s.out, a.dtype(), a.device());
  backend_for(a.device()).matmul(contiguous(a), contiguous(b), out, trans_a, trans_b, s.batch, s.m, s.n, s.k, false);
  return out;
}

void add_matmul_(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const MatmulShape s = matmul_shape(a, b, trans_a, trans_b, "add_matmul_");
  TRIAD_CHECK(out.shape() == s.out && out.device() == a.device() && out.is_contiguous() &&
                  (out.dtype() == a.dtype() || (out.dtype() == DType::f32 && is_16bit(a.dtype()))),
              "add_matmul_: out " << out.str() << " must be contiguous, " << shape_str(s.out) << ", on "
                                  << a.device().str() << " in " << dtype_name(a.dtype())
                                  << (is_16bit(a.dtype()) ? " or f32" : ""));
  backend_for(a.device()).matmul(contiguous(a), contiguous(b), out, trans_a, trans_b, s.batch, s.m, s.n, s.k, true);
}

void grouped_matmul_(const std::vector<Tensor>& out, const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                     bool trans_a, bool trans_b, bool accumulate) {
  TRIAD_CHECK(!a.empty() && a.size() == b.size() && a.size() == out.size(),
              "grouped_matmul_: expected one or more groups, as many of out, a and b; got "
                  << out.size() << ", " << a.size() << " and " << b.size());
  const Tensor& o = out[0];
  TRIAD_CHECK(
      o.device() == a[0].device() && (o.dtype() == a[0].dtype() || (o.dtype() == DType::f32 && is_16bit(a[0].dtype()))),
      "grouped_matmul_: out " << o.str() << " must be on " << a[0].device().str() << " in " << dtype_name(a[0].dtype())
                              << (is_16bit(a[0].dtype()) ? " or f32" : ""));
  std::vector<Tensor> ca, cb, live;
  std::vector<Backend::GemmDims> dims;
  for (size_t g = 0; g < a.size(); ++g) {
    const MatmulShape s = matmul_shape(a[g], b[g], trans_a, trans_b, "grouped_matmul_");
    TRIAD_CHECK(a[g].dim() == 2 && b[g].dim() == 2 && a[g].dtype() == a[0].dtype() && a[g].device() == a[0].device(),
                "grouped_matmul_: group " << g << " (" << a[g].str() << " @ " << b[g].str()
                                          << ") is not a 2-D product of group 0's dtype and device (" << a[0].str()
                                          << ")");
    TRIAD_CHECK(out[g].shape() == s.out && out[g].is_contiguous() && out[g].dtype() == o.dtype() &&
                    out[g].device() == o.device(),
                "grouped_matmul_: out " << out[g].str() << " of group " << g << " must be contiguous, "
                                        << shape_str(s.out) << ", as group 0's " << o.str());
    // An empty product is skipped, one over an inner dimension of 0 is zeros (or adds
    // nothing): the backends see only groups with a product to make.
    if (s.m == 0 || s.n == 0 || (s.k == 0 && accumulate)) continue;
    if (s.k == 0) {
      zero_(out[g]);
      continue;
    }
    ca.push_back(contiguous(a[g]));
    cb.push_back(contiguous(b[g]));
    live.push_back(out[g]);
    dims.push_back({s.m, s.n, s.k});
  }
  if (!live.empty()) backend_for(a[0].device()).grouped_matmul(ca, cb, live, trans_a, trans_b, dims, accumulate);
}

namespace {

void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  TRIAD_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
              op << ": input " << shape_str(x.shape()) << " does not match weight " << shape_str(weight.shape())
                 << " (expected input (..., " << (weight.dim() == 2 ? weight.size(1) : -1) << "))");
  check_float(x, op);
  check_same(x, weight, op);
  if (bias.defined()) {
    TRIAD_CHECK(bias.device() == x.device() &&
                    (bias.dtype() == x.dtype() || (bias.dtype() == DType::f32 && is_16bit(x.dtype()))),
                op << ": bias " << bias.str() << " must be on " << x.device().str() << " in " << dtype_name(x.dtype())
                   << (is_16bit(x.dtype()) ? " or f32" : ""));
    TRIAD_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0),
                op << ": bias " << shape_str(bias.shape()) << " does not match weight " << shape_str(weight.shape()));
  }
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(x, weight, bias, "linear");
  const Tensor x2 = contiguous(reshape(x, {-1, x.size(-1)}));
  const Tensor y = Tensor::empty({x2.size(0), weight.size(0)}, x.dtype(), x.device());
  backend_for(x.device()).linear(x2, contiguous(weight), bias.defined() ? contiguous(bias) : bias, y);
  Shape shape = x.shape();
  shape.back() = weight.size(0);
  return view(y, shape);
}

LinearGeluOut linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(x, weight, bias, "linear_gelu");
  const Tensor x2 = contiguous(reshape(x, {-1, x.size(-1)}));
  const Shape shape2{x2.size(0), weight.size(0)};
  LinearGeluOut r{Tensor::empty(shape2, x.dtype(), x.device()), Tensor::empty(shape2, x.dtype(), x.device())};
  backend_for(x.device()).linear_gelu(x2, contiguous(weight), bias.defined() ? contiguous(bias) : bias, r.pre, r.y);
  Shape shape = x.shape();
  shape.back() = weight.size(0);
  return {view(r.y, shape), view(r.pre, shape)};
}

GeluBiasGrads gelu_bias_backward(const Tensor& pre, const Tensor& grad_y, bool with_bias) {
  check_float(pre, "gelu_bias_backward");
  check_same(pre, grad_y, "gelu_bias_backward");
  TRIAD_CHECK(pre.dim() >= 1 && pre.shape() == grad_y.shape(),
              "gelu_bias_backward: pre " << shape_str(pre.shape()) << " and grad_y " << shape_str(grad_y.shape())
                                         << " must have one shape (..., out)");
  GeluBiasGrads g{Tensor::empty(pre.shape(), pre.dtype(), pre.device()),
                  with_bias ? Tensor::empty({pre.size(-1)}, pre.dtype(), pre.device()) : Tensor()};
  backend_for(pre.device()).gelu_bias_backward(contiguous(pre), contiguous(grad_y), g.grad_pre, g.grad_bias);
  return g;
}

void adamw_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
            const AdamWStep& step, const Tensor& param_copy) {
  adamw_({AdamWTensors{param, grad, exp_avg, exp_avg_sq, param_copy, step}});
}

void adamw_(const std::vector<AdamWTensors>& updates) {
  if (updates.empty()) return;
  std::vector<AdamWTensors> checked;
  checked.reserve(updates.size());
  for (const AdamWTensors& u : updates) {
    const Tensor& param = u.param;
    TRIAD_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64,
                "adamw_: expected an f32 or f64 parameter (master weights), got " << param.str());
    check_same(updates[0].param, param, "adamw_");
    for (const Tensor* t : {&u.grad, &u.exp_avg, &u.exp_avg_sq}) {
      check_same(param, *t, "adamw_");
      TRIAD_CHECK(t->shape() == param.shape(), "adamw_: " << t->str() << " does not match parameter " << param.str());
    }
    TRIAD_CHECK(param.is_contiguous() && u.exp_avg.is_contiguous() && u.exp_avg_sq.is_contiguous(),
                "adamw_: parameter and state must be contiguous");
    if (u.param_copy.defined())
      TRIAD_CHECK(is_16bit(u.param_copy.dtype()) && param.dtype() == DType::f32 &&
                      u.param_copy.shape() == param.shape() && u.param_copy.is_contiguous() &&
                      u.param_copy.device() == param.device(),
                  "adamw_: the parameter's copy must be a contiguous bf16 or f16 tensor shaped as the f32 parameter "
                      << param.str() << ", got " << u.param_copy.str());
    if (u.constants.defined())
      TRIAD_CHECK(param.dtype() == DType::f32 && u.constants.dtype() == DType::f32 &&
                      u.constants.numel() == kAdamWConstants && u.constants.is_contiguous() &&
                      u.constants.device() == param.device(),
                  "adamw_: the constants must be "
                      << kAdamWConstants << " contiguous f32 values on the f32 parameter's "
                      << "device " << param.device().str() << ", got " << u.constants.str() << " for " << param.str());
    if (param.numel() == 0) continue;
    checked.push_back(u);
    checked.back().grad = contiguous(u.grad);
  }
  if (!checked.empty()) backend_for(checked[0].param.device()).adamw(checked);
}

void adamw_constants(const AdamWStep& step, const Tensor& out) {
  TRIAD_CHECK(
      out.device().is_cpu() && out.dtype() == DType::f32 && out.numel() == kAdamWConstants && out.is_contiguous(),
      "adamw_constants: expected " << kAdamWConstants << " contiguous f32 values on the host, got " << out.str());
  const AdamWConstants<float> k = AdamWConstants<float>::of(step);
  std::memcpy(out.raw_data(), &k, sizeof k);
}

Tensor squared_norm(const std::vector<Tensor>& tensors, Device device) {
  Tensor out = Tensor::empty({1}, DType::f64, device);
  std::vector<Tensor> c;
  c.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    check_float(t, "squared_norm");
    TRIAD_CHECK(t.device() == device, "squared_norm: a tensor on " << t.device().str() << ", expected " << device.str());
    c.push_back(contiguous(t));
  }
  backend_for(device).sum_squares_to(c, out);
  return out;
}

void clip_to_norm_(const std::vector<Tensor>& grads, const Tensor& squared, double max_norm) {
  TRIAD_CHECK(squared.dtype() == DType::f64 && squared.numel() == 1,
              "clip_to_norm_: the squared norm must be one f64 element, got " << squared.str());
  TRIAD_CHECK(max_norm > 0.0, "clip_to_norm_: max norm must be positive, got " << max_norm);
  for (const Tensor& g : grads)
    TRIAD_CHECK(g.dtype() == DType::f32 && g.is_contiguous() && g.device() == squared.device(),
                "clip_to_norm_: expected contiguous f32 gradients on " << squared.device().str() << ", got "
                                                                        << g.str());
  backend_for(squared.device()).clip_to_norm(grads, squared, max_norm);
}

void mul_by_(const std::vector<Tensor>& tensors, const Tensor& factor) {
  TRIAD_CHECK(factor.dtype() == DType::f64 && factor.numel() == 1,
              "mul_by_: the factor must be one f64 element, got " << factor.str());
  for (const Tensor& t : tensors)
    TRIAD_CHECK(t.dtype() == DType::f32 && t.is_contiguous() && t.device() == factor.device(),
                "mul_by_: expected contiguous f32 tensors on " << factor.device().str() << ", got " << t.str());
  backend_for(factor.device()).mul_by(tensors, factor);
}

void loss_scale_step_(const Tensor& squared, const Tensor& state, const Tensor& ring, const Tensor& constants,
                      const Tensor& outcome, const LossScaleRule& rule) {
  const Device d = state.device();
  const auto check = [&](const Tensor& t, DType dtype, const Shape& shape, const char* what) {
    TRIAD_CHECK(t.dtype() == dtype && t.shape() == shape && t.is_contiguous() && t.device() == d,
                "loss_scale_step_: expected " << what << " " << shape_str(shape) << " " << dtype_name(dtype)
                                              << " contiguous on " << d.str() << ", got " << t.str());
  };
  TRIAD_CHECK(constants.dim() == 2 && ring.dim() == 2 && ring.size(0) > 0,
              "loss_scale_step_: expected constants (groups, " << kAdamWConstants << ") and ring (rows, 1 + "
                                                               << "groups " << kAdamWConstants << "), got "
                                                               << constants.str() << " and " << ring.str());
  const int64_t groups = constants.size(0);
  check(squared, DType::f64, {1}, "squared");
  check(state, DType::f64, {kLossScaleSlots}, "state");
  check(ring, DType::f64, {ring.size(0), 1 + groups * kAdamWConstants}, "ring");
  check(constants, DType::f32, {groups, kAdamWConstants}, "constants");
  check(outcome, DType::f64, {kStepOutcome}, "outcome");
  backend_for(d).loss_scale_step(squared, state, ring, constants, outcome, rule);
}

void sgd_(const std::vector<SGDTensors>& updates, const SGDStep& step) {
  std::vector<SGDTensors> checked;
  checked.reserve(updates.size());
  for (const SGDTensors& u : updates) {
    const Tensor& param = u.param;
    TRIAD_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64,
                "sgd_: expected an f32 or f64 parameter, got " << param.str());
    check_same(updates[0].param, param, "sgd_");
    check_same(param, u.grad, "sgd_");
    TRIAD_CHECK(u.grad.shape() == param.shape(), "sgd_: " << u.grad.str() << " does not match parameter " << param.str());
    TRIAD_CHECK(param.is_contiguous(), "sgd_: the parameter must be contiguous");
    if (u.momentum_buffer.defined()) {
      check_same(param, u.momentum_buffer, "sgd_");
      TRIAD_CHECK(u.momentum_buffer.shape() == param.shape() && u.momentum_buffer.is_contiguous(),
                  "sgd_: the momentum buffer " << u.momentum_buffer.str() << " must be contiguous, shaped as "
                                               << param.str());
    }
    if (param.numel() == 0) continue;
    checked.push_back(u);
    checked.back().grad = contiguous(u.grad);
  }
  if (!checked.empty()) backend_for(checked[0].param.device()).sgd(checked, step);
}

}  // namespace triad::ops
