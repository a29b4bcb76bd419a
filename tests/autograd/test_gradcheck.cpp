// Finite-difference gradient checks in f64 for every differentiable function of
// autograd/functions.h, and for a whole tiny GPT and Llama. Each output is reduced to a
// scalar with a fixed random weighting, L = sum(out * w), so every output element matters;
// the gradient from backward() is compared with central differences (eps = 1e-6) of L, as
// the error relative to the gradient's largest entry.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/fused_classifier.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_gradcheck)

using namespace triad;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

constexpr double kEps = 1e-6;
constexpr double kTolerance = 1e-6;

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  ops::normal_(t, 0.0, scale, gen);
  return t;
}

// A leaf that requires grad.
Tensor leaf(const Tensor& t) {
  Tensor c = ops::clone(t);
  set_requires_grad(c);
  return c;
}
Tensor leaf(const Shape& shape, uint64_t seed, double scale = 1.0) { return leaf(randn(shape, seed, scale)); }

// Values bounded away from 0 (relu's kink, log/sqrt/div domains): |x| in [0.5, 1.5].
Tensor away_from_zero(const Shape& shape, uint64_t seed, bool positive) {
  Tensor u = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  ops::uniform_(u, 0.5, 1.5, gen);
  if (!positive) {
    double* p = u.data<double>();
    for (int64_t i = 0; i < u.numel(); ++i)
      if (i % 3 != 1) p[i] = -p[i];
  }
  return leaf(u);
}

Tensor idx(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

struct Options {
  int64_t max_entries = -1;  // check at most this many entries per input (evenly spread); -1: all
  double tolerance = kTolerance;
  double eps = kEps;
  std::function<void()> before_eval;  // run before every evaluation (restoring generator state)
};

// Checks d(sum(f(inputs) * w))/d(input) for every input that requires grad.
void gradcheck(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs, const Options& opt = {}) {
  BOOST_TEST_CONTEXT(name) {
    auto run = [&] {
      if (opt.before_eval) opt.before_eval();
      return f(inputs);
    };
    for (const Tensor& t : inputs)
      if (t.defined() && requires_grad(t)) {
        BOOST_REQUIRE(t.dtype() == DType::f64 && t.is_contiguous());
        set_grad(t, Tensor());
      }
    // Analytical.
    const Tensor out = run();
    BOOST_REQUIRE(out.dtype() == DType::f64);
    BOOST_REQUIRE_MESSAGE(requires_grad(out), name << ": output does not require grad");
    const Tensor w = randn(out.shape(), 4242);
    backward(sum(mul(out, w)));
    // Numerical.
    NoGradGuard no_grad;
    auto loss = [&] { return ops::sum(ops::mul(run(), w)).item(); };
    int checked_inputs = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      if (!x.defined() || !requires_grad(x)) continue;
      ++checked_inputs;
      const Tensor g = grad(x);
      BOOST_REQUIRE_MESSAGE(g.defined(), name << ": input " << i << " received no gradient");
      BOOST_REQUIRE_MESSAGE(g.shape() == x.shape(), name << ": gradient " << g.str() << " for input " << x.str());
      const std::vector<double> analytic = g.to_vector<double>();
      double* p = x.data<double>();
      const int64_t n = x.numel();
      const int64_t stride =
          opt.max_entries > 0 && n > opt.max_entries ? (n + opt.max_entries - 1) / opt.max_entries : 1;
      double max_diff = 0, max_num = 0, max_ana = 0;
      int64_t worst = -1;
      for (int64_t j = 0; j < n; j += stride) {
        const double orig = p[j];
        p[j] = orig + opt.eps;
        const double lp = loss();
        p[j] = orig - opt.eps;
        const double lm = loss();
        p[j] = orig;
        const double num = (lp - lm) / (2 * opt.eps);
        const double diff = std::fabs(num - analytic[size_t(j)]);
        if (diff > max_diff) max_diff = diff, worst = j;
        max_num = std::max(max_num, std::fabs(num));
        max_ana = std::max(max_ana, std::fabs(analytic[size_t(j)]));
      }
      BOOST_TEST(max_num > 1e-8, name << ": input " << i << " has a zero numerical gradient (test cannot fail)");
      const double err = max_diff / std::max({max_num, max_ana, 1e-12});
      BOOST_TEST_MESSAGE(name << ": input " << i << " relative error " << err);
      BOOST_TEST(err <= opt.tolerance, name << ": input " << i << " " << shape_str(x.shape()) << ": relative error "
                                            << err << " at element " << worst << " (analytic "
                                            << (worst >= 0 ? analytic[size_t(worst)] : 0.0) << ")");
    }
    BOOST_TEST(checked_inputs > 0);
  }
}

// Inputs that do not require grad get no gradient.
void check_no_grad(const Tensor& t) { BOOST_TEST(!grad(t).defined()); }

}  // namespace

BOOST_AUTO_TEST_CASE(view_functions) {
  const Tensor x = leaf({2, 3, 4}, 1);
  gradcheck("view", [](auto& in) { return view(in[0], {6, 4}); }, {x});
  gradcheck("view -1", [](auto& in) { return view(in[0], {2, -1}); }, {x});
  gradcheck("reshape", [](auto& in) { return reshape(in[0], {4, 6}); }, {x});
  gradcheck("reshape copy", [](auto& in) { return reshape(transpose(in[0], 0, 2), {-1}); }, {x});
  gradcheck("transpose", [](auto& in) { return transpose(in[0], 0, 2); }, {x});
  gradcheck("transpose negative", [](auto& in) { return transpose(in[0], -1, -2); }, {x});
  gradcheck("permute", [](auto& in) { return permute(in[0], {2, 0, 1}); }, {x});
  gradcheck("permute negative", [](auto& in) { return permute(in[0], {1, -1, 0}); }, {x});
  gradcheck("narrow", [](auto& in) { return narrow(in[0], 1, 1, 2); }, {x});
  gradcheck("narrow negative dim", [](auto& in) { return narrow(in[0], -1, 0, 3); }, {x});
  gradcheck("select", [](auto& in) { return select(in[0], 1, 2); }, {x});
  gradcheck("select negative", [](auto& in) { return select(in[0], -1, -1); }, {x});
  gradcheck("unsqueeze", [](auto& in) { return unsqueeze(in[0], 1); }, {x});
  gradcheck("unsqueeze last", [](auto& in) { return unsqueeze(in[0], -1); }, {x});
  gradcheck("squeeze", [](auto& in) { return squeeze(in[0], 1); }, {leaf({3, 1, 2}, 2)});
  gradcheck("expand", [](auto& in) { return expand(in[0], {2, 3, 4}); }, {leaf({3, 1}, 3)});
  gradcheck("expand lead", [](auto& in) { return expand(in[0], {3, 4}); }, {leaf({4}, 4)});
  gradcheck("contiguous", [](auto& in) { return contiguous(transpose(in[0], 0, 1)); }, {x});
  gradcheck("contiguous of contiguous", [](auto& in) { return contiguous(mul(in[0], 2.0)); }, {x});
  gradcheck("views chained",
            [](auto& in) {
              return squeeze(select(narrow(permute(unsqueeze(in[0], 0), {0, 3, 2, 1}), 1, 1, 3), 2, 1), 0);
            },
            {x});
}

BOOST_AUTO_TEST_CASE(cat_function) {
  const Tensor a = leaf({2, 1, 3}, 5), b = leaf({2, 2, 3}, 6), c = leaf({2, 3, 3}, 7);
  gradcheck("cat dim 1", [](auto& in) { return cat({in[0], in[1], in[2]}, 1); }, {a, b, c});
  gradcheck("cat dim -1",
            [](auto& in) {
              return cat({in[0], transpose(in[1], 1, 2)}, -1);
            },
            {leaf({2, 3, 2}, 8), leaf({2, 1, 3}, 9)});
  gradcheck("cat dim 0", [](auto& in) { return cat({in[0], in[0]}, 0); }, {leaf({2, 3}, 10)});
  const Tensor constant = randn({2, 2, 3}, 11);
  gradcheck("cat with a constant", [&](auto& in) { return cat({in[0], constant}, 1); }, {a});
  check_no_grad(constant);
}

BOOST_AUTO_TEST_CASE(elementwise_functions) {
  const Tensor a = leaf({2, 3, 4}, 20), b = leaf({3, 1}, 21), c = leaf({2, 1, 4}, 22);
  const Tensor pos_b = away_from_zero({3, 1}, 23, false), pos_c = away_from_zero({2, 1, 4}, 24, false);
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  for (auto [name, op] : std::vector<std::pair<std::string, Binary>>{{"add", &add}, {"sub", &sub}, {"mul", &mul}}) {
    gradcheck(name + " same shape", [op](auto& in) { return op(in[0], in[1]); }, {a, leaf({2, 3, 4}, 25)});
    gradcheck(name + " broadcast right", [op](auto& in) { return op(in[0], in[1]); }, {a, b});
    gradcheck(name + " broadcast left", [op](auto& in) { return op(in[0], in[1]); }, {b, a});
    gradcheck(name + " broadcast both", [op](auto& in) { return op(in[0], in[1]); }, {b, c});
    if (name != "sub") gradcheck(name + " self", [op](auto& in) { return op(in[0], in[0]); }, {a});
  }
  gradcheck("sub self broadcast", [](auto& in) { return sub(in[0], sum(in[0], 1, true)); }, {a});
  gradcheck("div same shape", [](auto& in) { return div(in[0], in[1]); }, {a, away_from_zero({2, 3, 4}, 26, false)});
  gradcheck("div broadcast right", [](auto& in) { return div(in[0], in[1]); }, {a, pos_b});
  gradcheck("div broadcast left", [](auto& in) { return div(in[0], in[1]); },
            {b, away_from_zero({2, 3, 4}, 27, false)});
  gradcheck("div broadcast both", [](auto& in) { return div(in[0], in[1]); }, {b, pos_c});
  // One operand constant: only the other gets a gradient.
  const Tensor k = randn({3, 1}, 28), kd = away_from_zero({2, 3, 4}, 29, false);
  set_requires_grad(kd, false);
  gradcheck("mul by constant", [&](auto& in) { return mul(k, in[0]); }, {a});
  gradcheck("div by constant", [&](auto& in) { return div(in[0], kd); }, {a});
  gradcheck("constant div", [&](auto& in) { return div(kd, in[0]); }, {pos_b});
  check_no_grad(k);
  check_no_grad(kd);
  gradcheck("operators", [](auto& in) { return (in[0] * in[1] - in[1]) / in[2] + -in[0] * 0.5; },
            {a, b, away_from_zero({2, 3, 4}, 30, false)});

  gradcheck("add scalar", [](auto& in) { return add(in[0], 0.7); }, {a});
  gradcheck("mul scalar", [](auto& in) { return mul(in[0], -1.3); }, {a});
  gradcheck("neg", [](auto& in) { return neg(in[0]); }, {a});
  gradcheck("exp", [](auto& in) { return exp(in[0]); }, {a});
  gradcheck("log", [](auto& in) { return log(in[0]); }, {away_from_zero({2, 3, 4}, 31, true)});
  gradcheck("sqrt", [](auto& in) { return sqrt(in[0]); }, {away_from_zero({2, 3, 4}, 32, true)});
  gradcheck("tanh", [](auto& in) { return tanh(in[0]); }, {a});
  gradcheck("relu", [](auto& in) { return relu(in[0]); }, {away_from_zero({2, 3, 4}, 33, false)});
  gradcheck("pow 3", [](auto& in) { return pow(in[0], 3.0); }, {a});
  gradcheck("pow 2 negative base", [](auto& in) { return pow(in[0], 2.0); }, {away_from_zero({2, 3, 4}, 34, false)});
  gradcheck("pow 0.5", [](auto& in) { return pow(in[0], 0.5); }, {away_from_zero({2, 3, 4}, 35, true)});
  gradcheck("pow -1.5", [](auto& in) { return pow(in[0], -1.5); }, {away_from_zero({2, 3, 4}, 36, true)});
  gradcheck("gelu", [](auto& in) { return gelu(in[0]); }, {leaf({2, 3, 4}, 37, 2.0)});
  gradcheck("silu", [](auto& in) { return silu(in[0]); }, {leaf({2, 3, 4}, 38, 3.0)});
  gradcheck("elementwise on views", [](auto& in) { return exp(transpose(narrow(in[0], 2, 1, 3), 0, 2)); }, {a});
}

// Away from the kinks of clamp and maximum, where the one-sided derivatives differ.
BOOST_AUTO_TEST_CASE(composed_functions) {
  Options opt;
  opt.tolerance = 1e-7;
  gradcheck(
      "log_sigmoid", [](auto& in) { return log_sigmoid(in[0]); }, {leaf({3, 4}, 1, 3.0)}, opt);
  // Values 0.05 or more away from the bounds -0.5 and 0.5.
  const Tensor x = leaf(Tensor::from_vector(std::vector<double>{-1.2, -0.7, -0.3, 0.0, 0.2, 0.45, 0.6, 2.0}, {2, 4}));
  gradcheck(
      "clamp", [](auto& in) { return clamp(in[0], -0.5, 0.5); }, {x}, opt);
  gradcheck(
      "maximum", [](auto& in) { return maximum(in[0], in[1]); },
      {leaf({2, 3}, 2), leaf(ops::add(randn({2, 3}, 3), 0.05))}, opt);
  const Tensor mask = Tensor::from_vector(std::vector<double>{1, 0, 1, 1, 1, 0}, {2, 3});
  gradcheck(
      "masked_mean", [&](auto& in) { return masked_mean(in[0], mask, "masked_mean"); }, {leaf({2, 3}, 39)}, opt);
  check_no_grad(mask);
}

BOOST_AUTO_TEST_CASE(dropout_function) {
  Generator gen(77);
  const GeneratorState start = gen.state();
  const Tensor x = leaf({5, 6}, 40);
  {
    NoGradGuard ng;
    gen.set_state(start);
    const Tensor y = dropout(x, 0.4, true, gen);
    int64_t zeros = 0;
    for (double v : y.to_vector<double>()) zeros += v == 0.0;
    BOOST_TEST(zeros > 3);  // the mask drops some and keeps some
    BOOST_TEST(zeros < 27);
  }
  Options opt;
  opt.before_eval = [&] { gen.set_state(start); };
  gradcheck(
      "dropout", [&](auto& in) { return dropout(in[0], 0.4, true, gen); }, {x}, opt);
  gradcheck(
      "dropout of a view", [&](auto& in) { return dropout(transpose(in[0], 0, 1), 0.25, true, gen); }, {x}, opt);
  gradcheck("dropout eval", [&](auto& in) { return dropout(in[0], 0.4, false, gen); }, {x});
  gradcheck("dropout p = 0", [&](auto& in) { return dropout(in[0], 0.0, true, gen); }, {x});
}

BOOST_AUTO_TEST_CASE(reduction_functions) {
  const Tensor a = leaf({2, 3, 4}, 50);
  gradcheck("sum", [](auto& in) { return sum(in[0]); }, {a});
  gradcheck("mean", [](auto& in) { return mean(in[0]); }, {a});
  for (int64_t dim : {0, 1, 2, -1})
    for (bool keep : {false, true}) {
      const std::string n = " dim " + std::to_string(dim) + (keep ? " keepdim" : "");
      gradcheck("sum" + n, [=](auto& in) { return sum(in[0], dim, keep); }, {a});
      gradcheck("mean" + n, [=](auto& in) { return mean(in[0], dim, keep); }, {a});
    }
  gradcheck("sum of a transposed view", [](auto& in) { return sum(transpose(in[0], 0, 1), 2, true); }, {a});
}

BOOST_AUTO_TEST_CASE(matmul_function) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const std::string n = std::string(ta ? " ta" : "") + (tb ? " tb" : "");
      const Shape sa = ta ? Shape{4, 3} : Shape{3, 4}, sb = tb ? Shape{5, 4} : Shape{4, 5};
      Shape ba = sa, bb = sb;
      ba.insert(ba.begin(), 2);
      bb.insert(bb.begin(), 2);
      Shape ba4 = ba, bb4 = bb;
      ba4.insert(ba4.begin(), 2);
      bb4.insert(bb4.begin(), 2);
      auto f = [=](auto& in) { return matmul(in[0], in[1], ta, tb); };
      gradcheck("matmul 2d" + n, f, {leaf(sa, 60), leaf(sb, 61)});
      gradcheck("matmul batched" + n, f, {leaf(ba, 62), leaf(bb, 63)});
      gradcheck("matmul 4d" + n, f, {leaf(ba4, 64), leaf(bb4, 65)});
      gradcheck("matmul batched @ 2d" + n, f, {leaf(ba, 66), leaf(sb, 67)});
      gradcheck("matmul 4d @ 2d" + n, f, {leaf(ba4, 68), leaf(sb, 69)});
      const Tensor constant_b = randn(sb, 70), constant_a = randn(ba, 71);
      gradcheck("matmul batched @ constant 2d" + n, [=](auto& in) { return matmul(in[0], constant_b, ta, tb); },
                {leaf(ba, 72)});
      gradcheck("matmul constant batched @ 2d" + n, [=](auto& in) { return matmul(constant_a, in[0], ta, tb); },
                {leaf(sb, 73)});
      check_no_grad(constant_a);
      check_no_grad(constant_b);
    }
  gradcheck("matmul x x^T", [](auto& in) { return matmul(in[0], in[0], false, true); }, {leaf({3, 4}, 73)});
}

BOOST_AUTO_TEST_CASE(linear_function) {
  gradcheck("linear", [](auto& in) { return linear(in[0], in[1], in[2]); },
            {leaf({2, 3, 4}, 80), leaf({5, 4}, 81), leaf({5}, 82)});
  gradcheck("linear 2d", [](auto& in) { return linear(in[0], in[1], in[2]); },
            {leaf({3, 4}, 83), leaf({5, 4}, 84), leaf({5}, 85)});
  gradcheck("linear no bias", [](auto& in) { return linear(in[0], in[1]); }, {leaf({2, 3, 4}, 86), leaf({5, 4}, 87)});
  gradcheck("linear strided input", [](auto& in) { return linear(transpose(in[0], 0, 1), in[1], in[2]); },
            {leaf({3, 2, 4}, 88), leaf({5, 4}, 89), leaf({5}, 90)});
  const Tensor w = randn({5, 4}, 91);
  gradcheck("linear constant weight", [&](auto& in) { return linear(in[0], w, in[1]); },
            {leaf({2, 4}, 92), leaf({5}, 93)});
  check_no_grad(w);
}

// The fused ops of the transformer block (ops::linear_gelu, swiglu, add_layer_norm,
// add_rms_norm): their backwards, including the residual's gradient added inside the norm's.
BOOST_AUTO_TEST_CASE(fused_block_functions) {
  gradcheck("linear_gelu", [](auto& in) { return linear_gelu(in[0], in[1], in[2]); },
            {leaf({2, 3, 4}, 140), leaf({5, 4}, 141), leaf({5}, 142)});
  gradcheck("linear_gelu no bias", [](auto& in) { return linear_gelu(in[0], in[1]); },
            {leaf({2, 3, 4}, 143), leaf({5, 4}, 144)});
  gradcheck("linear_gelu strided input", [](auto& in) { return linear_gelu(transpose(in[0], 0, 1), in[1], in[2]); },
            {leaf({3, 2, 4}, 145), leaf({5, 4}, 146), leaf({5}, 147)});
  gradcheck("swiglu", [](auto& in) { return swiglu(in[0], in[1]); }, {leaf({2, 3, 5}, 148, 2.0), leaf({2, 3, 5}, 149)});

  const Tensor x = leaf({2, 3, 6}, 150, 2.0), r = leaf({2, 3, 6}, 151), w = leaf(ops::add(randn({6}, 152, 0.3), 1.0)),
               b = leaf({6}, 153);
  // Both outputs used (the sum nonlinearly, so its gradient is not constant), then each alone.
  gradcheck("add_layer_norm",
            [](auto& in) {
              const AddNorm o = add_layer_norm(in[0], in[1], in[2], in[3]);
              return add(mul(o.sum, o.sum), o.y);
            },
            {x, r, w, b});
  gradcheck("add_layer_norm y only", [](auto& in) { return add_layer_norm(in[0], in[1], in[2], in[3]).y; },
            {x, r, w, b});
  const Tensor wc = randn({6}, 154), bc = randn({6}, 155);  // constants: the norm's output is unused
  gradcheck("add_layer_norm sum only",
            [&](auto& in) {
              const Tensor s = add_layer_norm(in[0], in[1], wc, bc).sum;
              return mul(s, s);
            },
            {x, r});
  gradcheck("add_rms_norm",
            [](auto& in) {
              const AddNorm o = add_rms_norm(in[0], in[1], in[2], 0.1);
              return add(mul(o.sum, o.sum), o.y);
            },
            {x, r, w});
  gradcheck("add_rms_norm y only", [](auto& in) { return add_rms_norm(in[0], in[1], in[2]).y; }, {x, r, w});
}

BOOST_AUTO_TEST_CASE(nn_functions) {
  gradcheck("softmax", [](auto& in) { return softmax(in[0]); }, {leaf({2, 3, 5}, 100, 2.0)});
  gradcheck("softmax causal Tq < Tk", [](auto& in) { return softmax(in[0], true); }, {leaf({2, 3, 5}, 101, 2.0)});
  gradcheck("softmax causal square", [](auto& in) { return softmax(in[0], true); }, {leaf({2, 4, 4}, 102, 2.0)});
  gradcheck("softmax of a view", [](auto& in) { return softmax(transpose(in[0], 1, 2), true); },
            {leaf({2, 5, 5}, 103, 2.0)});

  const Tensor x = leaf({2, 3, 6}, 110, 2.0), w = leaf(ops::add(randn({6}, 111, 0.3), 1.0)), b = leaf({6}, 112);
  gradcheck("layer_norm", [](auto& in) { return layer_norm(in[0], in[1], in[2]); }, {x, w, b});
  gradcheck("layer_norm eps", [](auto& in) { return layer_norm(in[0], in[1], in[2], 0.1); }, {x, w, b});
  gradcheck("layer_norm strided", [](auto& in) { return layer_norm(transpose(in[0], 0, 1), in[1], in[2]); }, {x, w, b});

  const Tensor r = leaf({2, 3, 6}, 113, 2.0), rw = leaf(ops::add(randn({6}, 114, 0.3), 1.0));
  gradcheck("rms_norm", [](auto& in) { return rms_norm(in[0], in[1]); }, {r, rw});
  gradcheck("rms_norm eps", [](auto& in) { return rms_norm(in[0], in[1], 0.5); }, {r, rw});
  gradcheck("rms_norm strided", [](auto& in) { return rms_norm(transpose(in[0], 0, 1), in[1]); }, {r, rw});

  // Any tables: the backward holds for every cos and sin, not only rotations.
  const Tensor cos = randn({5, 6}, 115), sin = randn({5, 6}, 116);
  gradcheck("rotary_embedding", [&](auto& in) { return rotary_embedding(in[0], cos, sin); }, {leaf({2, 3, 5, 6}, 117)});
  gradcheck("rotary_embedding strided", [&](auto& in) { return rotary_embedding(transpose(in[0], 1, 2), cos, sin); },
            {leaf({2, 5, 3, 6}, 118)});
  gradcheck("rotary_embedding features strided",
            [&](auto& in) { return rotary_embedding(transpose(in[0], 2, 3), cos, sin); }, {leaf({2, 3, 6, 5}, 119)});
  gradcheck("rotary_embedding 2-D", [&](auto& in) { return rotary_embedding(in[0], cos, sin); }, {leaf({5, 6}, 163)});
  const Tensor row_cos = randn({2, 1, 5, 6}, 164), row_sin = randn({2, 1, 5, 6}, 165);
  gradcheck("rotary_embedding per-row tables", [&](auto& in) { return rotary_embedding(in[0], row_cos, row_sin); },
            {leaf({2, 3, 5, 6}, 166)});

  const Tensor ids = idx({4, 0, 4, 2, 1, 4}, {2, 3});
  gradcheck("embedding", [&](auto& in) { return embedding(in[0], ids); }, {leaf({5, 3}, 120)});
  gradcheck("embedding i32", [&](auto& in) { return embedding(in[0], ops::to(ids, DType::i32)); }, {leaf({5, 3}, 121)});

  const Tensor targets = idx({1, 4, -100, 0, 3, 3}, {2, 3});
  gradcheck("cross_entropy", [&](auto& in) { return cross_entropy(in[0], targets); }, {leaf({2, 3, 5}, 130, 2.0)});
  gradcheck("cross_entropy 2d", [&](auto& in) { return cross_entropy(in[0], ops::reshape(targets, {6})); },
            {leaf({6, 5}, 131, 2.0)});
  gradcheck("cross_entropy custom ignore",
            [&](auto& in) {
              return cross_entropy(in[0], idx({1, 4, 2, 0, 3, 3}, {2, 3}), 3);
            },
            {leaf({2, 3, 5}, 132, 2.0)});
  gradcheck("cross_entropy strided logits", [&](auto& in) { return cross_entropy(transpose(in[0], 0, 1), targets); },
            {leaf({3, 2, 5}, 133, 2.0)});
  // The ignored row gets an exactly zero gradient.
  const Tensor logits = leaf({2, 3, 5}, 134);
  backward(cross_entropy(logits, targets));
  for (int64_t v = 0; v < 5; ++v) BOOST_TEST(grad(logits).at({0, 2, v}) == 0.0);
}

BOOST_AUTO_TEST_CASE(linear_cross_entropy_function) {
  // x (2, 4, 3) and a weight of 7 rows, 5 of them classes; 8 rows in chunks of 3.
  const Tensor targets = idx({1, 4, -100, 0, 3, 3, 2, -100}, {2, 4});
  gradcheck("linear_cross_entropy",
            [&](auto& in) { return linear_cross_entropy(in[0], in[1], targets, -100, {.classes = 5}, 3); },
            {leaf({2, 4, 3}, 135), leaf({7, 3}, 136)});
  // A tensor-parallel rank's part: rows [3, 7) of a vocabulary of 6 (rows 3, 4, 5 classes).
  gradcheck("linear_cross_entropy part",
            [&](auto& in) {
              return linear_cross_entropy(in[0], in[1], idx({5, 3, 0, -100}, {4}), -100,
                                          {.first = 3, .classes = 3, .vocab = 6}, 3);
            },
            {leaf({4, 3}, 137), leaf({4, 3}, 138)});
}

BOOST_AUTO_TEST_CASE(causal_attention_function) {
  auto f = [](double scale) { return [scale](auto& in) { return causal_attention(in[0], in[1], in[2], scale); }; };
  gradcheck("causal_attention", f(0.7), {leaf({2, 2, 5, 3}, 150), leaf({2, 2, 5, 3}, 151), leaf({2, 2, 5, 3}, 152)});
  gradcheck("causal_attention Tq < Tk", f(0.5),
            {leaf({1, 2, 3, 6}, 153), leaf({1, 2, 6, 6}, 154), leaf({1, 2, 6, 6}, 155)});
  gradcheck("causal_attention grouped key/value heads", f(0.6),
            {leaf({2, 4, 4, 3}, 159), leaf({2, 2, 5, 3}, 160), leaf({2, 2, 5, 3}, 161)});
  // One position: out = v whatever q and k are, so only v has a gradient.
  const Tensor q1 = randn({2, 1, 1, 4}, 156), k1 = randn({2, 1, 1, 4}, 157);
  gradcheck("causal_attention T = 1", [&](auto& in) { return causal_attention(q1, k1, in[0], 1.0); },
            {leaf({2, 1, 1, 4}, 158)});
  // Across the CPU kernel's 64-row blocks; a sample of entries.
  Options opt;
  opt.max_entries = 40;
  gradcheck("causal_attention blocks", f(0.4),
            {leaf({1, 1, 70, 2}, 159), leaf({1, 1, 70, 2}, 160), leaf({1, 1, 70, 2}, 161)}, opt);
  gradcheck("causal_attention of views",
            [](auto& in) {
              const Tensor qkv = reshape(in[0], {2, 4, 3, 2, 3});  // (B, T, q|k|v, NH, hs)
              auto part = [&](int64_t i) { return transpose(select(qkv, 2, i), 1, 2); };
              return causal_attention(part(0), part(1), part(2), 0.6);
            },
            {leaf({2, 4, 18}, 162)});
}

BOOST_AUTO_TEST_CASE(composite_attention) {
  // A small causal attention with a residual, using most functions together.
  gradcheck("attention",
            [](auto& in) {
              const Tensor& x = in[0];  // (B, T, C) = (2, 4, 6), two heads of 3
              const Tensor qkv = linear(layer_norm(x, in[3], in[4]), in[1], in[2]);  // (2, 4, 18)
              auto heads = [&](int64_t part) {
                return transpose(reshape(narrow(qkv, 2, part * 6, 6), {2, 4, 2, 3}), 1, 2);
              };
              const Tensor att = softmax(mul(matmul(heads(0), heads(1), false, true), 1 / std::sqrt(3.0)), true);
              const Tensor y = reshape(transpose(matmul(att, heads(2)), 1, 2), {2, 4, 6});
              return add(x, gelu(y));
            },
            {leaf({2, 4, 6}, 140), leaf({18, 6}, 141, 0.5), leaf({18}, 142), leaf(ops::add(randn({6}, 143, 0.2), 1.0)),
             leaf({6}, 144, 0.2)});
}

// ---------------------------------------------------------------- whole models in f64

namespace {

// Converts every parameter to f64 in place: the modules share the Tensor handles.
void params_to_f64(nn::Module& m) {
  for (auto& [name, p] : m.named_parameters()) {
    TensorImpl& impl = p.impl();
    const Tensor d = ops::to(p, DType::f64);
    impl.storage = d.storage();
    impl.dtype = DType::f64;
    impl.strides = d.strides();
    impl.offset = 0;
  }
}

// Larger weights than the GPT-2 initialization, so that every nonlinearity is exercised
// and gradients are far above the finite-difference noise.
void randomize(nn::Module& m, uint64_t seed) {
  Generator gen(seed);
  for (auto& [name, p] : m.named_parameters()) {
    if ((name.find("ln") != std::string::npos || name.find("norm") != std::string::npos) && name.ends_with("weight")) {
      ops::normal_(p, 1.0, 0.2, gen);
    } else {
      ops::normal_(p, 0.0, p.dim() == 1 ? 0.2 : 0.4, gen);
    }
  }
}

void check_model(nn::LanguageModel& model, const std::string& name) {
  params_to_f64(model);
  randomize(model, 555);
  const auto params = model.named_parameters();
  int64_t total = 0;
  for (auto& [n, p] : params) {
    BOOST_REQUIRE(p.dtype() == DType::f64);
    BOOST_REQUIRE(requires_grad(p));
    total += p.numel();
  }
  BOOST_TEST_MESSAGE(name << ": " << params.size() << " parameters, " << total << " entries");
  const Tensor ids = idx({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3}, {2, 8});
  const Tensor targets = idx({1, 4, 1, 5, 9, 2, 6, -100, 3, 5, 8, 9, 7, 9, 3, 10}, {2, 8});
  const GeneratorState rng = default_generator().state();
  Options opt;
  opt.before_eval = [&] { default_generator().set_state(rng); };
  std::vector<Tensor> inputs;
  for (auto& [n, p] : params) inputs.push_back(p);
  gradcheck(
      name, [&](auto&) { return model.loss(ids, targets); }, inputs, opt);
  default_generator().set_state(rng);
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpt_gradients_match_finite_differences) {
  nn::GPT model({.n_layer = 2, .n_head = 2, .d_model = 8, .seq_len = 8, .vocab_size = 11});
  check_model(model, "gpt");
}

BOOST_AUTO_TEST_CASE(llama_gradients_match_finite_differences) {
  // Grouped-query attention: 4 query heads share 2 key/value heads.
  nn::Llama model({.n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16, .intermediate = 12, .seq_len = 8,
                   .vocab_size = 11, .rope_theta = 100.0});
  check_model(model, "llama");
}

BOOST_AUTO_TEST_CASE(gpt_with_dropout_and_checkpointing_matches_finite_differences) {
  nn::GPTConfig config{.n_layer = 2,
                       .n_head = 2,
                       .d_model = 8,
                       .seq_len = 8,
                       .vocab_size = 11,
                       .dropout = 0.2,
                       .activation_checkpointing = true};
  nn::GPT model(config);
  check_model(model, "gpt dropout checkpointed");
}

BOOST_AUTO_TEST_SUITE_END()  // test_gradcheck
