#include "autograd/functions.h"

#include "autograd/weight_grad.h"

#include <algorithm>
#include <cmath>

#include "autograd/flop_count.h"
#include "autograd/record.h"
#include "autograd/weight_grad.h"

namespace triad {

// ---- views: the backward maps the gradient back onto the input's shape ----

Tensor view(const Tensor& t, const Shape& shape) {
  return record("view", {t}, ops::view(t, shape),
                [s = t.shape()](const Grads& g) { return Grads{ops::reshape(g[0], s)}; });
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  return record("reshape", {t}, ops::reshape(t, shape),
                [s = t.shape()](const Grads& g) { return Grads{ops::reshape(g[0], s)}; });
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  return record("transpose", {t}, ops::transpose(t, dim0, dim1),
                [=](const Grads& g) { return Grads{ops::transpose(g[0], dim0, dim1)}; });
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  Tensor y = ops::permute(t, dims);  // validates dims before they index `inverse`
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[normalize_dim(dims[i], t.dim(), "permute")] = int64_t(i);
  return record("permute", {t}, y, [inverse](const Grads& g) { return Grads{ops::permute(g[0], inverse)}; });
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  const int d = normalize_dim(dim, t.dim(), "narrow");
  return record("narrow", {t}, ops::narrow(t, d, start, length), [=, s = t.shape()](const Grads& g) {
    Tensor full = Tensor::zeros(s, g[0].dtype(), g[0].device());
    ops::copy_(ops::narrow(full, d, start, length), g[0]);
    return Grads{full};
  });
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  const int d = normalize_dim(dim, t.dim(), "select");
  const int64_t i = index < 0 ? index + t.size(d) : index;
  return record("select", {t}, ops::select(t, d, i), [=, s = t.shape()](const Grads& g) {
    Tensor full = Tensor::zeros(s, g[0].dtype(), g[0].device());
    ops::copy_(ops::select(full, d, i), g[0]);
    return Grads{full};
  });
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  return record("unsqueeze", {t}, ops::unsqueeze(t, dim),
                [s = t.shape()](const Grads& g) { return Grads{ops::reshape(g[0], s)}; });
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  return record("squeeze", {t}, ops::squeeze(t, dim),
                [s = t.shape()](const Grads& g) { return Grads{ops::reshape(g[0], s)}; });
}

Tensor expand(const Tensor& t, const Shape& shape) {
  return record("expand", {t}, ops::expand(t, shape),
                [s = t.shape()](const Grads& g) { return Grads{ops::sum_to(g[0], s)}; });
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return record("contiguous", {t}, ops::contiguous(t), [](const Grads& g) { return Grads{g[0]}; });
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TRIAD_CHECK(!tensors.empty(), "cat: no tensors given");
  const Tensor& first = tensors[0];
  const int d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (const Tensor& t : tensors) {
    Shape a = t.shape(), b = first.shape();
    TRIAD_CHECK(t.dim() == first.dim() && t.dtype() == first.dtype(),
                "cat: " << t.str() << " does not match " << first.str());
    a[d] = b[d] = 0;
    TRIAD_CHECK(a == b, "cat: shapes " << shape_str(t.shape()) << " and " << shape_str(first.shape())
                                       << " differ outside dimension " << d);
    shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    starts.push_back(at);
    ops::copy_(ops::narrow(out, d, at, t.size(d)), t);
    at += t.size(d);
  }
  std::vector<int64_t> lengths;
  for (const Tensor& t : tensors) lengths.push_back(t.size(d));
  return record("cat", tensors, out, [=](const Grads& g) {
    Grads r;
    for (size_t i = 0; i < starts.size(); ++i) r.push_back(ops::narrow(g[0], d, starts[i], lengths[i]));
    return r;
  });
}

Tensor to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return record("to", {t}, ops::to(t, dtype),
                [from = t.dtype()](const Grads& g) { return Grads{ops::to(g[0], from)}; });
}

namespace {

bool is_16bit(const Tensor& t) { return t.defined() && (t.dtype() == DType::bf16 || t.dtype() == DType::f16); }

// Note [16-bit activations]: mixed precision (the config's bf16 and fp16 sections) stores
// parameters and their gradients in bf16/f16; the optimizer keeps f32 master weights and
// moments in its shard and updates in f32 (zero/zero_optimizer.h). The dtype of the
// activations follows the parameters', on every device:
// - the embedding lookup returns rows in the table's dtype, and every op returns its
//   input's dtype (tensor/ops.h), so every activation, and every gradient flowing back
//   through one, is stored in 16 bits between ops; each kernel loads 16-bit values as f32,
//   computes in f32 (products accumulate in f32, on tensor cores on a GPU) and rounds its
//   result once to nearest even;
// - f32 constants beside 16-bit activations (rotary tables, masks, an f32 bias) are read
//   in f32 where they meet, and the result keeps the activation's dtype;
// - a product meeting an activation of another dtype than its weight's (f32 features fed
//   to a 16-bit model) narrows it to the weight's dtype once, with a recorded `to`;
// - the loss is f32: cross_entropy reads 16-bit logits and keeps its log-sum-exp and mean
//   in f32; the logits' gradient comes back in their dtype.
// So a steady-state step converts nothing between layers (ops::conversion_count, checked
// by tests/engine/test_mixed_precision.cpp): the only f32 tensors are the loss and what the
// optimizer owns. Parameter gradients come back in the parameter's dtype (like()).
// f16 follows the same rule: an activation beyond its range (65504) becomes inf, the
// step's gradients overflow and the loss scaler skips the step, which a smaller scale does
// not cure (a model whose activations leave f16's range wants bf16).
Tensor like(const Tensor& grad, const Tensor& param) { return ops::to(grad, param.dtype()); }

// x as a product reads it beside `weight`: converted (recorded) to a 16-bit weight's dtype,
// or a 16-bit x to the weight's when the weight is not 16-bit (Note [16-bit activations]).
Tensor product_operand(const Tensor& x, const Tensor& weight) {
  return x.dtype() != weight.dtype() && (is_16bit(x) || is_16bit(weight)) ? to(x, weight.dtype()) : x;
}

// The profiler's counts (autograd/flop_count.h): a product of `out` elements each summing k
// terms, and `n` other operations.
const Tensor& counted_product(const Tensor& out, int64_t k) {
  flop_count::add(out.numel() * k, 2 * out.numel() * k);
  return out;
}
const Tensor& counted_linear(const Tensor& out, const Tensor& weight, const Tensor& bias) {
  counted_product(out, weight.size(1));
  if (bias.defined()) flop_count::add(0, out.numel());
  return out;
}
const Tensor& counted(const Tensor& out, int64_t per_element = 1) {
  flop_count::add(0, out.numel() * per_element);
  return out;
}

}  // namespace

Tensor compute_dtype(const Tensor& t) { return is_16bit(t) ? to(t, DType::f32) : t; }

// ---- elementwise ----

Tensor add(const Tensor& a, const Tensor& b) {
  return record("add", {a, b}, counted(ops::add(a, b)), [sa = a.shape(), sb = b.shape()](const Grads& g) {
    return Grads{ops::sum_to(g[0], sa), ops::sum_to(g[0], sb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  return record("sub", {a, b}, counted(ops::sub(a, b)), [sa = a.shape(), sb = b.shape()](const Grads& g) {
    return Grads{ops::sum_to(g[0], sa), ops::sum_to(ops::neg(g[0]), sb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  const bool ga = requires_grad(a), gb = requires_grad(b);
  return record("mul", {a, b}, counted(ops::mul(a, b)), [=](const Grads& g) {
    return Grads{ga ? ops::sum_to(ops::mul(g[0], b), a.shape()) : Tensor(),
                 gb ? ops::sum_to(ops::mul(g[0], a), b.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  const bool gb = requires_grad(b);
  Tensor y = ops::div(a, b);
  return record("div", {a, b}, y, [=, a_shape = a.shape(), y = detach(y)](const Grads& g) {
    Tensor ga = ops::div(g[0], b);
    Tensor gbv = gb ? ops::sum_to(ops::neg(ops::mul(ga, y)), b.shape()) : Tensor();
    return Grads{ops::sum_to(ga, a_shape), gbv};
  });
}

Tensor add(const Tensor& a, double b) {
  return record("add_scalar", {a}, counted(ops::add(a, b)), [](const Grads& g) { return Grads{g[0]}; });
}

Tensor mul(const Tensor& a, double b) {
  return record("mul_scalar", {a}, counted(ops::mul(a, b)), [b](const Grads& g) { return Grads{ops::mul(g[0], b)}; });
}

Tensor neg(const Tensor& a) {
  return record("neg", {a}, ops::neg(a), [](const Grads& g) { return Grads{ops::neg(g[0])}; });
}

Tensor exp(const Tensor& a) {
  Tensor y = ops::exp(a);
  return record("exp", {a}, y, [y = detach(y)](const Grads& g) { return Grads{ops::mul(g[0], y)}; });
}

Tensor log(const Tensor& a) {
  return record("log", {a}, ops::log(a), [a](const Grads& g) { return Grads{ops::div(g[0], a)}; });
}

Tensor sqrt(const Tensor& a) {
  Tensor y = ops::sqrt(a);
  return record("sqrt", {a}, y, [y = detach(y)](const Grads& g) { return Grads{ops::div(ops::mul(g[0], 0.5), y)}; });
}

Tensor tanh(const Tensor& a) {
  Tensor y = ops::tanh(a);
  return record("tanh", {a}, y, [y = detach(y)](const Grads& g) {
    return Grads{ops::mul(g[0], ops::add(ops::neg(ops::mul(y, y)), 1.0))};
  });
}

Tensor relu(const Tensor& a) {
  Tensor y = ops::relu(a);
  return record("relu", {a}, y, [y = detach(y)](const Grads& g) { return Grads{ops::relu_backward(y, g[0])}; });
}

Tensor pow(const Tensor& a, double exponent) {
  return record("pow", {a}, ops::pow(a, exponent),
                [=](const Grads& g) { return Grads{ops::mul(ops::mul(g[0], ops::pow(a, exponent - 1.0)), exponent)}; });
}

Tensor gelu(const Tensor& x) {
  return record("gelu", {x}, counted(ops::gelu(x)), [x](const Grads& g) { return Grads{ops::gelu_backward(x, g[0])}; });
}

Tensor silu(const Tensor& x) {
  return record("silu", {x}, counted(ops::silu(x), 4),
                [x](const Grads& g) { return Grads{ops::silu_backward(x, g[0])}; });
}

Tensor swiglu(const Tensor& a, const Tensor& b) {
  return record("swiglu", {a, b}, counted(ops::swiglu(a, b), 5), [a, b](const Grads& g) {
    ops::SwigluGrads d = ops::swiglu_backward(a, b, ops::to(g[0], a.dtype()));
    return Grads{d.da, d.db};
  });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  if (!training || p == 0.0) return x;
  const uint64_t seed = gen.state().seed, first = gen.advance(uint64_t(x.numel()));
  return record("dropout", {x}, ops::dropout(x, p, seed, first),
                [=](const Grads& g) { return Grads{ops::dropout(g[0], p, seed, first)}; });
}

// ---- composed, with PyTorch's gradients at their kinks ----

namespace {

// 1 where a > b, else 0 (a and b of one shape).
Tensor greater(const Tensor& a, const Tensor& b) {
  const Tensor d = ops::sub(a, b);
  return ops::relu_backward(d, Tensor::ones(d.shape(), d.dtype(), d.device()));
}

Tensor one_minus(const Tensor& t) { return ops::add(ops::neg(t), 1.0); }

}  // namespace

Tensor log_sigmoid(const Tensor& x) {
  // |x| = relu(x) + relu(-x); softplus(-x) = relu(-x) + log(1 + exp(-|x|)).
  const Tensor pos = ops::relu(x), neg = ops::relu(ops::neg(x));
  const Tensor log1p_exp = ops::log(ops::add(ops::exp(ops::neg(ops::add(pos, neg))), 1.0));
  const Tensor y = ops::neg(ops::add(neg, log1p_exp));
  // d/dx log sigmoid(x) = sigmoid(-x) = exp(log sigmoid(-x)) = exp(-(relu(x) + log1p_exp)).
  return record("log_sigmoid", {x}, y, [pos, log1p_exp](const Grads& g) {
    return Grads{ops::mul(g[0], ops::exp(ops::neg(ops::add(pos, log1p_exp))))};
  });
}

Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  const Tensor l = ops::contiguous(ops::expand(ops::to(detach(lo), x.dtype()), x.shape()));
  const Tensor h = ops::contiguous(ops::expand(ops::to(detach(hi), x.dtype()), x.shape()));
  const Tensor below = greater(l, x), above = greater(x, h);
  const Tensor inside = one_minus(ops::add(below, above));
  // Products with 0/1 masks are exact: the result is x, lo or hi bit for bit.
  const Tensor y = ops::add(ops::add(ops::mul(x, inside), ops::mul(l, below)), ops::mul(h, above));
  return record("clamp", {x}, y, [inside](const Grads& g) { return Grads{ops::mul(g[0], inside)}; });
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  return clamp(x, Tensor::full({}, lo, x.dtype(), x.device()), Tensor::full({}, hi, x.dtype(), x.device()));
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  TRIAD_CHECK(a.shape() == b.shape(),
              "maximum: shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape()) << " differ");
  const Tensor gt = greater(a, b), lt = greater(b, a);
  const Tensor y = ops::add(ops::mul(a, one_minus(lt)), ops::mul(b, lt));
  return record("maximum", {a, b}, y, [gt, lt](const Grads& g) {
    const Tensor tie_half = ops::mul(one_minus(ops::add(gt, lt)), 0.5);
    return Grads{ops::mul(g[0], ops::add(gt, tie_half)), ops::mul(g[0], ops::add(lt, tie_half))};
  });
}

// ---- reductions ----

Tensor sum(const Tensor& a) {
  return record("sum", {a}, ops::sum(a), [s = a.shape()](const Grads& g) { return Grads{ops::expand(g[0], s)}; });
}

Tensor sum(const Tensor& a, int64_t dim, bool keepdim) {
  const int d = normalize_dim(dim, a.dim(), "sum");
  return record("sum_dim", {a}, ops::sum(a, d, keepdim), [=, s = a.shape()](const Grads& g) {
    return Grads{ops::expand(keepdim ? g[0] : ops::unsqueeze(g[0], d), s)};
  });
}

Tensor mean(const Tensor& a) {
  return record("mean", {a}, ops::mean(a), [s = a.shape()](const Grads& g) {
    return Grads{ops::expand(ops::mul(g[0], 1.0 / double(numel(s))), s)};
  });
}

Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  const int d = normalize_dim(dim, a.dim(), "mean");
  return record("mean_dim", {a}, ops::mean(a, d, keepdim), [=, s = a.shape()](const Grads& g) {
    Tensor gd = ops::mul(keepdim ? g[0] : ops::unsqueeze(g[0], d), 1.0 / double(s[d]));
    return Grads{ops::expand(gd, s)};
  });
}

Tensor masked_mean(const Tensor& x, const Tensor& mask, const char* what, double tokens) {
  const Tensor m = mask_like(mask, x, what);
  return mul(sum(mul(x, m)), 1.0 / (tokens > 0 ? tokens : mask_tokens(m, what)));
}

double mask_tokens(const Tensor& mask, const char* what) {
  const double count = ops::sum(mask).item();
  TRIAD_CHECK(count > 0, what << ": the mask selects no token (its sum is " << count << ")");
  return count;
}

Tensor mask_like(const Tensor& mask, const Tensor& x, const char* what) {
  TRIAD_CHECK(mask.defined() && mask.shape() == x.shape(),
              what << ": the mask must have the shape " << shape_str(x.shape()) << " of what it masks, got "
                   << (mask.defined() ? shape_str(mask.shape()) : std::string("none")));
  return ops::to(ops::to(detach(mask), x.device()), x.dtype());
}

// ---- linear algebra ----

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const bool ga = requires_grad(a), gb = requires_grad(b);
  const Tensor c = counted_product(ops::matmul(a, b, trans_a, trans_b), trans_a ? a.size(-2) : a.size(-1));
  return record("matmul", {a, b}, c, [=](const Grads& g) {
    const Tensor dc = like(g[0], a);
    // C = A' B' with A' = op(A), B' = op(B): dA' = dC B'^T, dB' = A'^T dC.
    Tensor da, db;
    if (ga) {
      if (!trans_a)
        da = ops::matmul(dc, b, false, !trans_b);
      else if (b.dim() == 2 && dc.dim() > 2)  // b shared by the batch: dA = (dC B'^T)^T
        da = ops::contiguous(ops::transpose(ops::matmul(dc, b, false, !trans_b), -1, -2));
      else
        da = ops::matmul(b, dc, trans_b, true);
      da = like(da, a);
    }
    if (gb) {
      db = trans_b ? ops::matmul(dc, a, true, trans_a) : ops::matmul(a, dc, !trans_a, false);
      if (b.dim() == 2 && db.dim() > 2) db = ops::sum_to(db, b.shape());
      db = like(db, b);
    }
    return Grads{da, db};
  });
}

namespace {

struct LinearNeeds {
  bool x, weight, bias;  // which inputs want gradients, as the forward saw them
};
LinearNeeds linear_needs(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return {requires_grad(x), requires_grad(weight), bias.defined() && requires_grad(bias)};
}

// The gradients of {x, weight, bias} of x weight^T + bias given g2 (rows, out), the gradient
// of that sum in weight's dtype; fused_db: the bias gradient when the caller's kernel summed
// it already (ops::gelu_bias_backward), else summed from g2 here.
Grads linear_grads(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearNeeds needs, const Tensor& g2,
                   const Tensor& fused_db) {
  const bool gx = needs.x, gw = needs.weight;
  const Tensor db_ready = needs.bias && fused_db.defined() ? like(fused_db, bias) : Tensor();
  const bool sum_db = needs.bias && !db_ready.defined();
  const Tensor& w = weight;
  const Tensor x2 = ops::reshape(x, {-1, w.size(1)});
  Tensor dx = gx ? ops::reshape(ops::matmul(g2, w), x.shape()) : Tensor();
  // dw undefined when added into the weight's .grad (Note [Gradients added in place]).
  const auto weight_grads = [=](bool in_pass) {
    Tensor dw;
    if (const Tensor into = gw ? grad_to_add_into(weight, g2.dtype()) : Tensor(); into.defined()) {
      ops::add_matmul_(into, g2, x2, true, false);
      grad_added_in_place(weight, in_pass);
    } else if (gw) {
      dw = like(ops::matmul(g2, x2, true, false), weight);
    }
    return std::pair(dw, sum_db ? like(ops::sum(g2, 0), bias) : Tensor());
  };
  // Note [Split backward]: a leaf weight's gradients wait in the queue, delivered later; a
  // bias gradient already summed goes on at once, so the queue does not hold it.
  WeightGradQueue* queue = deferred_weight_grads();
  if (queue && gw && is_leaf(weight) && (!sum_db || is_leaf(bias))) {
    queue->push([weight_grads, w_edge = gradient_edge(weight), b_edge = sum_db ? gradient_edge(bias) : Edge{}] {
      const auto [dw, db] = weight_grads(/*in_pass=*/false);
      if (dw.defined()) w_edge.node->apply({dw});
      if (b_edge.node) b_edge.node->apply({db});
    });
    return Grads{dx, Tensor(), db_ready};
  }
  auto [dw, db] = weight_grads(/*in_pass=*/true);
  return Grads{dx, dw, sum_db ? db : db_ready};
}

}  // namespace

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  const Tensor x = product_operand(input, weight);
  const LinearNeeds needs = linear_needs(x, weight, bias);
  return record(
      "linear", {x, weight, bias}, counted_linear(ops::linear(x, weight, bias), weight, bias), [=](const Grads& g) {
        return linear_grads(x, weight, bias, needs, like(ops::reshape(g[0], {-1, weight.size(0)}), weight), Tensor());
      });
}

// pre is an intermediate, saved by handle; the GELU's input gradient and the bias gradient
// come from one kernel.
Tensor linear_gelu(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  const Tensor x = product_operand(input, weight);
  const LinearNeeds needs = linear_needs(x, weight, bias);
  ops::LinearGeluOut r = ops::linear_gelu(x, weight, bias);
  counted(counted_linear(r.y, weight, bias));
  return record("linear_gelu", {x, weight, bias}, r.y, [=, pre = r.pre](const Grads& g) {
    ops::GeluBiasGrads d = ops::gelu_bias_backward(pre, ops::to(g[0], pre.dtype()), needs.bias);
    return linear_grads(x, weight, bias, needs, like(ops::reshape(d.grad_pre, {-1, weight.size(0)}), weight),
                        d.grad_bias);
  });
}

// ---- grouped linear: an MoE layer's experts ----

namespace {

// The groups of a tensor (sum rows, ...) of rows[0], rows[1], ... rows each, as views.
std::vector<Tensor> groups_of(const Tensor& t, const std::vector<int64_t>& rows) {
  std::vector<Tensor> v;
  int64_t at = 0;
  for (const int64_t n : rows) {
    v.push_back(ops::narrow(t, 0, at, n));
    at += n;
  }
  return v;
}

// The groups t[0], t[1], ... of a tensor (G, ...), as views.
std::vector<Tensor> groups_of(const Tensor& t) {
  std::vector<Tensor> v;
  for (int64_t g = 0; g < t.size(0); ++g) v.push_back(ops::select(t, 0, g));
  return v;
}

std::vector<Tensor> pick(const std::vector<Tensor>& all, const std::vector<size_t>& which) {
  std::vector<Tensor> v;
  for (size_t i : which) v.push_back(all[i]);
  return v;
}

void check_grouped_linear(const Tensor& x, const std::vector<int64_t>& rows, const std::vector<Tensor>& weights,
                          const std::vector<Tensor>& biases) {
  const size_t G = weights.size();
  int64_t total = 0;
  bool negative = false;
  for (const int64_t n : rows) total += n, negative = negative || n < 0;
  TRIAD_CHECK(G >= 1 && x.dim() == 2 && rows.size() == G && !negative && total == x.size(0) &&
                  (biases.empty() || biases.size() == G),
              "grouped_linear: expected x (rows, in) with "
                  << G << " row counts >= 0 summing to its rows, and 0 or " << G << " biases for " << G
                  << " weights, got x " << shape_str(x.shape()) << ", " << rows.size() << " row counts summing to "
                  << total << " and " << biases.size() << " biases");
  for (size_t g = 0; g < biases.size(); ++g) {
    const Tensor& b = biases[g];
    TRIAD_CHECK(b.dim() == 1 && b.size(0) == weights[0].size(0) && b.device() == x.device() &&
                    (b.dtype() == weights[0].dtype() || (b.dtype() == DType::f32 && is_16bit(weights[0]))),
                "grouped_linear: bias " << g << " " << b.str() << " does not match weight " << weights[0].str());
  }
}

}  // namespace

Tensor grouped_linear(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                      bool gelu) {
  TRIAD_CHECK(x.dim() == 3 && x.size(0) == int64_t(weights.size()),
              "grouped_linear: expected x (" << weights.size() << ", rows, in) for " << weights.size()
                                             << " weights, got x " << shape_str(x.shape()));
  const int64_t G = x.size(0), rows = x.size(1);
  const Tensor y =
      grouped_linear(reshape(x, {G * rows, x.size(2)}), std::vector<int64_t>(size_t(G), rows), weights, biases, gelu);
  return reshape(y, {G, rows, y.size(1)});
}

// The arithmetic of each group is linear's (linear_gelu's) on the CPU, bit for bit: the
// product rounded as the backend's linear rounds it (a 16-bit product with a bias or a GELU
// after it stays f32 until the bias is added and the GELU read), the bias added to it
// afterwards, the bias gradient the sum over the rows of the output's gradient. A group of
// no rows computes nothing; its weight's gradient is zeros (or nothing added).
Tensor grouped_linear(const Tensor& input, const std::vector<int64_t>& rows, const std::vector<Tensor>& weights,
                      const std::vector<Tensor>& biases, bool gelu) {
  check_grouped_linear(input, rows, weights, biases);
  const Tensor x = product_operand(input, weights[0]);
  const size_t G = weights.size();
  const int64_t n = weights[0].size(0);
  const bool with_bias = !biases.empty();
  const DType wide = is_16bit(x) && (with_bias || gelu) ? DType::f32 : x.dtype();
  const Tensor sum = Tensor::empty({x.size(0), n}, wide, x.device());
  const std::vector<Tensor> xs = groups_of(ops::contiguous(x), rows), sums = groups_of(sum, rows);
  ops::grouped_matmul_(sums, xs, weights, false, true, false);
  if (with_bias)
    for (size_t g = 0; g < G; ++g)
      if (rows[g] > 0) ops::add_(sums[g], ops::to(biases[g], wide));
  const Tensor pre = ops::to(sum, x.dtype());
  const Tensor y = gelu ? ops::to(ops::gelu(sum), x.dtype()) : pre;
  counted_linear(y, weights[0], with_bias ? biases[0] : Tensor());
  if (gelu) counted(y);

  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  std::vector<char> needs;  // per input: wants a gradient
  for (const Tensor& t : inputs) needs.push_back(requires_grad(t));
  return record("grouped_linear", inputs, y, [=, pre = gelu ? pre : Tensor()](const Grads& gy) {
    // The gradient of each group's x w^T + b in the weights' dtype (Note [Gradients added in place]).
    const Tensor g2 =
        ops::contiguous(like(gelu ? ops::gelu_backward(pre, ops::to(gy[0], pre.dtype())) : gy[0], weights[0]));
    const std::vector<Tensor> g2s = groups_of(g2, rows);
    Grads grads(inputs.size());
    if (needs[0]) {
      grads[0] = Tensor::empty(x.shape(), g2.dtype(), x.device());
      ops::grouped_matmul_(groups_of(grads[0], rows), g2s, weights, false, false, false);
    }
    if (with_bias)
      for (size_t g = 0; g < G; ++g)  // each group's rows in order, as linear's
        if (needs[1 + G + g]) grads[1 + G + g] = like(ops::sum(g2s[g], 0), biases[g]);
    // The weights' gradients, added into their .grad where it takes them (one grouped GEMM
    // per .grad dtype), the others returned from one more.
    const auto weight_grads = [=](bool in_pass) {
      std::vector<Tensor> dw(G), into(G);
      std::vector<size_t> fresh;
      std::vector<std::pair<DType, std::vector<size_t>>> added;
      for (size_t g = 0; g < G; ++g) {
        if (!needs[1 + g]) continue;
        into[g] = grad_to_add_into(weights[g], g2.dtype());
        if (!into[g].defined()) {
          fresh.push_back(g);
          continue;
        }
        auto same = std::find_if(added.begin(), added.end(), [&](const auto& a) { return a.first == into[g].dtype(); });
        if (same == added.end()) {
          added.emplace_back(into[g].dtype(), std::vector<size_t>{});
          same = std::prev(added.end());
        }
        same->second.push_back(g);
      }
      for (const auto& [dtype, which] : added) {
        ops::grouped_matmul_(pick(into, which), pick(g2s, which), pick(xs, which), true, false, true);
        for (size_t g : which) grad_added_in_place(weights[g], in_pass);
      }
      if (!fresh.empty()) {
        const Tensor products = Tensor::empty({int64_t(fresh.size()), n, x.size(1)}, g2.dtype(), x.device());
        ops::grouped_matmul_(groups_of(products), pick(g2s, fresh), pick(xs, fresh), true, false, false);
        for (size_t i = 0; i < fresh.size(); ++i)
          dw[fresh[i]] = like(ops::select(products, 0, int64_t(i)), weights[fresh[i]]);
      }
      return dw;
    };
    // Note [Split backward]: leaf weights' gradients wait in the queue; the biases' go on now.
    WeightGradQueue* queue = deferred_weight_grads();
    bool deferred = queue != nullptr, any = false;
    for (size_t g = 0; g < G; ++g)
      if (needs[1 + g]) any = true, deferred = deferred && is_leaf(weights[g]);
    if (deferred && any) {
      std::vector<Edge> edges(G);
      for (size_t g = 0; g < G; ++g)
        if (needs[1 + g]) edges[g] = gradient_edge(weights[g]);
      queue->push([weight_grads, edges] {
        const std::vector<Tensor> dw = weight_grads(/*in_pass=*/false);
        for (size_t g = 0; g < dw.size(); ++g)
          if (dw[g].defined()) edges[g].node->apply({dw[g]});
      });
      return grads;
    }
    const std::vector<Tensor> dw = weight_grads(/*in_pass=*/true);
    for (size_t g = 0; g < G; ++g) grads[1 + g] = dw[g];
    return grads;
  });
}

// ---- neural-network functions ----

Tensor softmax(const Tensor& x, bool causal) {
  Tensor y = counted(ops::softmax(x, causal));
  return record("softmax", {x}, y, [y = detach(y)](const Grads& g) { return Grads{ops::softmax_backward(y, g[0])}; });
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  ops::LayerNormOut r = ops::layer_norm(x, weight, bias, eps);
  counted(r.y, weight.defined() ? 5 : 4);
  return record("layer_norm", {x, weight, bias}, r.y, [=, mean = r.mean, rstd = r.rstd](const Grads& g) {
    ops::LayerNormGrads d = ops::layer_norm_backward(ops::contiguous(g[0]), x, weight, mean, rstd);
    return Grads{like(d.dx, x), like(d.dweight, weight), like(d.dbias, bias)};
  });
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  TRIAD_CHECK(x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0),
              "rms_norm: weight " << shape_str(weight.shape()) << " does not match the last dimension of x "
                                  << shape_str(x.shape()));
  TRIAD_CHECK(eps > 0.0, "rms_norm: eps must be positive, got " << eps);
  ops::RmsNormOut r = ops::rms_norm(x, weight, eps);
  counted(r.y, 4);
  return record("rms_norm", {x, weight}, r.y, [=, rstd = r.rstd](const Grads& g) {
    ops::RmsNormGrads d = ops::rms_norm_backward(ops::contiguous(g[0]), x, weight, rstd);
    return Grads{like(d.dx, x), like(d.dweight, weight)};
  });
}

// sum is saved through detach (Note [Saved outputs]); the norm's input gradient and the
// gradient sum receives along the residual stream meet inside the norm's backward kernel.
AddNorm add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps) {
  ops::AddLayerNormOut o = ops::add_layer_norm(x, r, weight, bias, eps);
  counted(o.sum);
  counted(o.y, 5);
  const std::vector<Tensor> out =
      record("add_layer_norm", {x, r, weight, bias}, {o.sum, o.y},
             [=, sum = detach(o.sum), mean = o.mean, rstd = o.rstd](const Grads& g) {
               if (!g[1].defined()) return Grads{g[0], g[0], Tensor(), Tensor()};
               ops::LayerNormGrads d = ops::layer_norm_backward(ops::contiguous(g[1]), sum, weight, mean, rstd, g[0]);
               const Tensor dx = like(d.dx, x);
               return Grads{dx, dx, like(d.dweight, weight), like(d.dbias, bias)};
             });
  return {out[0], out[1]};
}

AddNorm add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps) {
  ops::AddRmsNormOut o = ops::add_rms_norm(x, r, weight, eps);
  counted(o.sum);
  counted(o.y, 4);
  const std::vector<Tensor> out =
      record("add_rms_norm", {x, r, weight}, {o.sum, o.y}, [=, sum = detach(o.sum), rstd = o.rstd](const Grads& g) {
        if (!g[1].defined()) return Grads{g[0], g[0], Tensor()};
        ops::RmsNormGrads d = ops::rms_norm_backward(ops::contiguous(g[1]), sum, weight, rstd, g[0]);
        const Tensor dx = like(d.dx, x);
        return Grads{dx, dx, like(d.dweight, weight)};
      });
  return {out[0], out[1]};
}

// ops::rotary checks the shapes (its errors name it).
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  // Two products and an add an element (the fused multiply-add counted as both).
  const Tensor y = counted(ops::rotary(x, cos, sin), 3);
  // rotate_half is antisymmetric, so the backward is g cos - rotate_half(g sin): the same
  // pairs with the tables' signs swapped (ops::rotary_backward).
  return record("rotary_embedding", {x}, y,
                [cos, sin](const Grads& g) { return Grads{ops::rotary_backward(g[0], cos, sin)}; });
}

Tensor embedding(const Tensor& weight, const Tensor& indices, TableRows rows) {
  return record("embedding", {weight}, ops::embedding(weight, indices, rows),
                [=, idx = detach(indices), v = weight.size(0)](const Grads& g) {
                  return Grads{like(ops::embedding_backward(g[0], idx, v, rows), weight)};
                });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, int64_t classes) {
  TRIAD_CHECK(logits.dim() >= 1 && targets.shape() == Shape(logits.shape().begin(), logits.shape().end() - 1),
              "cross_entropy: logits " << shape_str(logits.shape()) << " do not match targets "
                                       << shape_str(targets.shape()) << " (expected logits (..., V), targets (...))");
  const Tensor l2 = ops::reshape(logits, {-1, logits.size(-1)});
  const Tensor t1 = ops::reshape(targets, {-1});
  ops::CrossEntropyOut r = ops::cross_entropy(l2, t1, ignore_index, classes);
  return record("cross_entropy", {logits}, r.loss,
                [=, l2 = detach(l2), s = logits.shape(), lse = r.lse, count = r.count](const Grads& g) {
                  return Grads{
                      ops::reshape(ops::cross_entropy_backward(l2, t1, lse, g[0], count, ignore_index, classes), s)};
                });
}

// q, k, v are saved by handle (Note [Saved inputs]) and out through detach (Note [Saved
// outputs]); with lse that is O(T hs) per head where the composed attention kept the
// (T, T) probabilities. The kernels read bf16/f16 as stored, so 16-bit inputs are saved as
// they are, without an f32 copy, and their gradients come back in their dtype (Note
// [16-bit activations]).
namespace {

void count_attention_flops(const Tensor& q) {
  flop_count::add(2 * q.numel() * q.size(-2), 4 * q.numel() * q.size(-2) + q.numel() / q.size(-1) * q.size(-2));
}

// Part `part` (0: q, 1: k, 2: v) of a fused projection (B, T, 3C) as heads (B, n_head, T, hs).
Tensor qkv_heads(const Tensor& qkv, int64_t n_head, int64_t part) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  return ops::transpose(ops::reshape(ops::narrow(qkv, 2, part * C, C), {B, T, n_head, C / n_head}), 1, 2);
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& key_start) {
  ops::AttentionOut r = ops::causal_attention(q, k, v, scale, key_start);
  count_attention_flops(q);
  return record("causal_attention", {q, k, v}, r.out, [=, out = detach(r.out), lse = r.lse](const Grads& g) {
    ops::AttentionGrads d =
        ops::causal_attention_backward(q, k, v, out, lse, ops::to(g[0], q.dtype()), scale, key_start);
    return Grads{d.dq, d.dk, d.dv};
  });
}

// qkv is saved by handle, as causal_attention's q, k and v, and its heads taken again as
// views in the backward.
Tensor causal_attention_qkv(const Tensor& qkv, int64_t n_head, double scale, const Tensor& key_start) {
  TRIAD_CHECK(qkv.dim() == 3 && n_head > 0 && qkv.size(2) % (3 * n_head) == 0,
              "causal_attention_qkv: expected qkv (B, T, 3C) with C a multiple of " << n_head << " heads, got "
                                                                                    << shape_str(qkv.shape()));
  const Tensor q = qkv_heads(qkv, n_head, 0);
  ops::AttentionOut r =
      ops::causal_attention(q, qkv_heads(qkv, n_head, 1), qkv_heads(qkv, n_head, 2), scale, key_start);
  count_attention_flops(q);
  return record("causal_attention", {qkv}, r.out, [=, out = detach(r.out), lse = r.lse](const Grads& g) {
    const Tensor q = qkv_heads(qkv, n_head, 0), k = qkv_heads(qkv, n_head, 1), v = qkv_heads(qkv, n_head, 2);
    const Tensor grad = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
    ops::causal_attention_backward(
        q, k, v, out, lse, ops::to(g[0], q.dtype()), scale, key_start,
        {qkv_heads(grad, n_head, 0), qkv_heads(grad, n_head, 1), qkv_heads(grad, n_head, 2)});
    return Grads{grad};
  });
}

}  // namespace triad
