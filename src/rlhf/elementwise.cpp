#include "rlhf/elementwise.h"

#include "autograd/functions.h"
#include "autograd/meta.h"
#include "autograd/record.h"
#include "tensor/ops.h"

namespace triad::rlhf {

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

Tensor mask_like(const Tensor& mask, const Tensor& x, const char* what) {
  TRIAD_CHECK(mask.defined() && mask.shape() == x.shape(),
              what << ": the mask must have the shape " << shape_str(x.shape()) << " of what it masks, got "
                   << (mask.defined() ? shape_str(mask.shape()) : std::string("none")));
  return ops::to(ops::to(detach(mask), x.device()), x.dtype());
}

Tensor masked_mean(const Tensor& x, const Tensor& mask, const char* what) {
  const Tensor m = mask_like(mask, x, what);
  const double count = ops::sum(m).item();
  TRIAD_CHECK(count > 0, what << ": the mask selects no token (its sum is " << count << ")");
  return mul(sum(mul(x, m)), 1.0 / count);
}

}  // namespace triad::rlhf
