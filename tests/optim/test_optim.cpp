// Optimizers, schedules and clipping against closed forms: AdamW (bias correction, decoupled
// weight decay, PyTorch's arithmetic; L2 mode, no bias correction, betas changed between
// steps), SGD (momentum, dampening, nesterov, L2 decay), decay_groups, WarmupCosineLR /
// ConstantLR, global-norm clipping (over ranks: parts counted once, inf/NaN reaching every
// rank), DeepSpeed's loss scaler, and the errors for bad options.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "support/check.h"
#include "tensor/optimizer_ops.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_optim)

using namespace triad;

namespace {

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    BOOST_ERROR("expected triad::Error mentioning '" << needle << "', nothing was thrown");
  } catch (const Error& e) {
    const std::string msg = e.what();
    BOOST_TEST(msg.find(needle) != std::string::npos, "message '" << msg << "' does not mention '" << needle << "'");
  }
}

Tensor param(const std::vector<double>& v, DType dtype = DType::f64) {
  Tensor p = ops::to(Tensor::from_vector(v, {int64_t(v.size())}), dtype);
  set_requires_grad(p, true);
  return p;
}

void give_grad(const Tensor& p, const std::vector<double>& g) {
  set_grad(p, ops::to(Tensor::from_vector(g, {int64_t(g.size())}), p.dtype()));
}

void check_close(const Tensor& t, const std::vector<double>& expected, double tol, const std::string& what) {
  const std::vector<double> got = t.to_vector<double>();
  BOOST_TEST_REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::fabs(got[i] - expected[i]) <= tol,
               what << "[" << i << "]: got " << got[i] << ", expected " << expected[i]);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// AdamW

// Step 1 of Adam is lr·g/(|g| + eps) after bias correction (m̂ = g, v̂ = g²): a sign step.
BOOST_AUTO_TEST_CASE(adamw_first_step_is_a_sign_step_with_decoupled_decay) {
  const double lr = 0.1, wd = 0.01;
  Tensor p = param({1.0, -2.0, 0.5, 3.0});
  optim::AdamW opt({{{p}, wd}}, {.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
  give_grad(p, {0.1, -0.2, 0.3, 0.0});
  opt.step();
  BOOST_TEST(opt.step_count() == 1);
  // p·(1 - lr·wd) - lr·g/(|g| + eps), the g = 0 entry only decays.
  const double d = 1 - lr * wd;  // 0.999
  check_close(p,
              {1.0 * d - lr * 0.1 / (0.1 + 1e-8), -2.0 * d + lr * 0.2 / (0.2 + 1e-8), 0.5 * d - lr * 0.3 / (0.3 + 1e-8),
               3.0 * d},
              1e-14, "p");
  // Literal values: 0.999 - 0.1 = 0.899, -1.998 + 0.1 = -1.898, 0.4995 - 0.1 = 0.3995, 2.997.
  check_close(p, {0.899, -1.898, 0.3995, 2.997}, 1e-7, "p (literal)");
  check_close(opt.exp_avg(0), {0.01, -0.02, 0.03, 0.0}, 1e-15, "exp_avg");
  check_close(opt.exp_avg_sq(0), {1e-5, 4e-5, 9e-5, 0.0}, 1e-18, "exp_avg_sq");
}

BOOST_AUTO_TEST_CASE(adamw_two_steps_closed_form) {
  const double lr = 0.05, b1 = 0.8, b2 = 0.95, eps = 1e-3, wd = 0.2;  // large eps: it matters
  const std::vector<double> p0{1.0, -2.0, 0.5}, g1{0.1, -0.2, 0.3}, g2{-0.4, 0.5, 0.0};
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor p = param(p0, dt);
    optim::AdamW opt({{{p}, wd}}, {.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps});
    give_grad(p, g1);
    opt.step();
    give_grad(p, g2);
    opt.step();
    // Closed form after two steps, entry by entry:
    //   m1 = (1-b1) g1, v1 = (1-b2) g1², p1 = p0 (1 - lr wd) - lr m1/(1-b1) / (sqrt(v1/(1-b2)) + eps)
    //   m2 = b1 m1 + (1-b1) g2, v2 = b2 v1 + (1-b2) g2²,
    //   p2 = p1 (1 - lr wd) - lr/(1-b1²) m2 / (sqrt(v2)/sqrt(1-b2²) + eps)
    std::vector<double> expected(3), m2(3), v2(3);
    for (int i = 0; i < 3; ++i) {
      const double m1 = (1 - b1) * g1[i], v1 = (1 - b2) * g1[i] * g1[i];
      const double p1 = p0[i] * (1 - lr * wd) - lr * std::fabs(g1[i]) / (std::fabs(g1[i]) + eps) * (g1[i] < 0 ? -1 : 1);
      m2[i] = b1 * m1 + (1 - b1) * g2[i];
      v2[i] = b2 * v1 + (1 - b2) * g2[i] * g2[i];
      expected[i] = p1 * (1 - lr * wd) - lr / (1 - b1 * b1) * m2[i] / (std::sqrt(v2[i]) / std::sqrt(1 - b2 * b2) + eps);
    }
    // Entry 0 by hand: p1 = 0.99 - 0.05·0.1/0.101 = 0.94049505; m2 = 0.016 - 0.08 = -0.064;
    // v2 = 0.000475 + 0.008 = 0.008475; m̂ = -0.064/0.36 = -0.1777778; sqrt(v̂) = sqrt(0.008475/0.0975)
    // = 0.2948272; p2 = 0.94049505·0.99 + 0.05·0.1777778/0.2958272 = 0.9310901 + 0.0300476 = 0.9611377.
    BOOST_TEST(std::fabs(expected[0] - 0.9611377) < 1e-7, "closed form entry 0 = " << expected[0]);
    const double tol = dt == DType::f64 ? 1e-13 : 2e-6;
    check_close(p, expected, tol, dt == DType::f64 ? "p (f64)" : "p (f32)");
    check_close(opt.exp_avg(0), m2, tol, "exp_avg");
    check_close(opt.exp_avg_sq(0), v2, tol * 1e-2, "exp_avg_sq");
    BOOST_TEST(opt.step_count() == 2);
  }
}

// Note [Adam's constants in memory]: ops::adamw_ reading its constants from a tensor (as a
// recorded step does) updates bit for bit as when given the step; a wrong tensor is named.
BOOST_AUTO_TEST_CASE(adamw_reads_its_constants_from_memory) {
  const optim::AdamWOptions o{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3};
  const Tensor given = param({1.0, -2.0, 0.5}, DType::f32), read = ops::clone(given);
  const Tensor m = Tensor::zeros({3}), v = Tensor::zeros({3}), read_m = Tensor::zeros({3}), read_v = Tensor::zeros({3});
  const Tensor constants = Tensor::empty({kAdamWConstants});
  for (int64_t t = 1; t <= 3; ++t) {
    const Tensor g = param({0.1 * double(t), -0.2, 0.3 / double(t)}, DType::f32);
    const AdamWStep s = optim::adamw_step(o, o.lr / double(t), 0.2, t);
    ops::adamw_constants(s, constants);
    AdamWStep unread = s;
    unread.lr = unread.bias_correction1 = NAN;  // an update reading these would show it
    ops::adamw_({AdamWTensors{given, g, m, v, Tensor(), s}});
    ops::adamw_({AdamWTensors{read, g, read_m, read_v, Tensor(), unread, constants}});
  }
  BOOST_TEST(test::max_abs_diff(read, given) == 0.0);
  BOOST_TEST(test::max_abs_diff(read_m, m) == 0.0);
  BOOST_TEST(test::max_abs_diff(read_v, v) == 0.0);
  // Constants that say skip (an overflowed fp16 step, kAdamWSkip) change nothing.
  const Tensor before = ops::clone(read), before_m = ops::clone(read_m), before_v = ops::clone(read_v);
  constants.data<float>()[kAdamWSkip] = 1.0f;
  ops::adamw_({AdamWTensors{read, param({5.0, 5.0, 5.0}, DType::f32), read_m, read_v, Tensor(),
                            optim::adamw_step(o, o.lr, 0.2, 4), constants}});
  BOOST_TEST(test::max_abs_diff(read, before) == 0.0);
  BOOST_TEST(test::max_abs_diff(read_m, before_m) == 0.0);
  BOOST_TEST(test::max_abs_diff(read_v, before_v) == 0.0);
  const AdamWStep s = optim::adamw_step(o, o.lr, 0.2, 1);
  const Tensor g = Tensor::zeros({3});
  test::check_error(
      [&] {
        ops::adamw_({AdamWTensors{read, g, read_m, read_v, Tensor(), s, Tensor::empty({6})}});
      },
      {"adamw_", "constants", "8"});
  test::check_error([&] { ops::adamw_constants(s, Tensor::empty({7}, DType::f64)); }, {"adamw_constants", "f32"});
}

// Two steps of AdamW with `options` from kAdamP0 on the gradients kAdamG1 then kAdamG2, in dtype dt (the
// Adam variants' closed-form tests below).
constexpr double kLr = 0.05, kB1 = 0.8, kB2 = 0.95, kEps = 1e-3, kWd = 0.2;
const std::vector<double> kAdamP0{1.0, -2.0, 0.5}, kAdamG1{0.1, -0.2, 0.3}, kAdamG2{-0.4, 0.5, 0.0};

std::pair<Tensor, std::unique_ptr<optim::AdamW>> two_steps(optim::AdamWOptions options, DType dt) {
  options.lr = kLr, options.beta1 = kB1, options.beta2 = kB2, options.eps = kEps;
  Tensor p = param(kAdamP0, dt);
  auto opt = std::make_unique<optim::AdamW>(std::vector<optim::ParamGroup>{{{p}, kWd}}, options);
  give_grad(p, kAdamG1);
  opt->step();
  give_grad(p, kAdamG2);
  opt->step();
  return {p, std::move(opt)};
}

// adam_w_mode false (DeepSpeed's Adam, PyTorch's Adam): the decay is L2, wd p added to the
// gradient before the moments, and the parameter itself is not decayed.
BOOST_AUTO_TEST_CASE(adam_l2_mode_two_steps_closed_form) {
  const double lr = kLr, b1 = kB1, b2 = kB2, eps = kEps, wd = kWd;
  const std::vector<double>&p0 = kAdamP0, &g1 = kAdamG1, &g2 = kAdamG2;
  for (DType dt : {DType::f64, DType::f32}) {
    const auto [p, opt] = two_steps({.adam_w_mode = false}, dt);
    //   h1 = g1 + wd p0, m1 = (1-b1) h1, v1 = (1-b2) h1², p1 = p0 - lr h1 / (|h1| + eps)
    //   h2 = g2 + wd p1, m2 = b1 m1 + (1-b1) h2, v2 = b2 v1 + (1-b2) h2²,
    //   p2 = p1 - lr/(1-b1²) m2 / (sqrt(v2)/sqrt(1-b2²) + eps)
    std::vector<double> expected(3), m2(3), v2(3);
    for (int i = 0; i < 3; ++i) {
      const double h1 = g1[i] + wd * p0[i], m1 = (1 - b1) * h1, v1 = (1 - b2) * h1 * h1;
      const double p1 = p0[i] - lr * h1 / (std::fabs(h1) + eps);
      const double h2 = g2[i] + wd * p1;
      m2[i] = b1 * m1 + (1 - b1) * h2;
      v2[i] = b2 * v1 + (1 - b2) * h2 * h2;
      expected[i] = p1 - lr / (1 - b1 * b1) * m2[i] / (std::sqrt(v2[i]) / std::sqrt(1 - b2 * b2) + eps);
    }
    // Entry 0 by hand: h1 = 0.1 + 0.2 = 0.3; p1 = 1 - 0.05·0.3/0.301 = 0.9501661;
    // h2 = -0.4 + 0.2·0.9501661 = -0.2099668; m2 = 0.048 - 0.0419934 = 0.0060066;
    // v2 = 0.004275 + 0.05·0.0440860 = 0.0064793; m̂ = 0.0060066/0.36 = 0.0166851;
    // sqrt(v̂) = sqrt(0.0064793/0.0975) = 0.2577876; p2 = 0.9501661 - 0.05·0.0166851/0.2587876 = 0.9469424.
    BOOST_TEST(std::fabs(expected[0] - 0.9469424) < 1e-7, "closed form entry 0 = " << expected[0]);
    const double tol = dt == DType::f64 ? 1e-13 : 2e-6;
    check_close(p, expected, tol, dt == DType::f64 ? "p (f64)" : "p (f32)");
    check_close(opt->exp_avg(0), m2, tol, "exp_avg");
    check_close(opt->exp_avg_sq(0), v2, tol * 1e-2, "exp_avg_sq");
  }
}

// bias_correction false (DeepSpeed's fused Adam): step size lr, denominator sqrt(v) + eps.
BOOST_AUTO_TEST_CASE(adamw_without_bias_correction_two_steps_closed_form) {
  const double lr = kLr, b1 = kB1, b2 = kB2, eps = kEps, wd = kWd;
  const std::vector<double>&p0 = kAdamP0, &g1 = kAdamG1, &g2 = kAdamG2;
  for (DType dt : {DType::f64, DType::f32}) {
    const auto [p, opt] = two_steps({.bias_correction = false}, dt);
    //   m1 = (1-b1) g1, v1 = (1-b2) g1², p1 = p0 (1 - lr wd) - lr m1 / (sqrt(v1) + eps)
    //   m2 = b1 m1 + (1-b1) g2, v2 = b2 v1 + (1-b2) g2², p2 = p1 (1 - lr wd) - lr m2 / (sqrt(v2) + eps)
    std::vector<double> expected(3);
    for (int i = 0; i < 3; ++i) {
      const double m1 = (1 - b1) * g1[i], v1 = (1 - b2) * g1[i] * g1[i];
      const double p1 = p0[i] * (1 - lr * wd) - lr * m1 / (std::sqrt(v1) + eps);
      const double m2 = b1 * m1 + (1 - b1) * g2[i], v2 = b2 * v1 + (1 - b2) * g2[i] * g2[i];
      expected[i] = p1 * (1 - lr * wd) - lr * m2 / (std::sqrt(v2) + eps);
    }
    // Entry 0 by hand: m1 = 0.02, sqrt(v1) = sqrt(0.0005) = 0.0223607; p1 = 0.99 - 0.05·0.02/0.0233607
    // = 0.9471930 (a step of 0.043, not the corrected sign step's 0.05); m2 = 0.016 - 0.08 = -0.064,
    // sqrt(v2) = sqrt(0.008475) = 0.0920598; p2 = 0.9377211 + 0.05·0.064/0.0930598 = 0.9721076.
    BOOST_TEST(std::fabs(expected[0] - 0.9721076) < 1e-7, "closed form entry 0 = " << expected[0]);
    check_close(p, expected, dt == DType::f64 ? 1e-13 : 2e-6, dt == DType::f64 ? "p (f64)" : "p (f32)");
  }
}

// New betas take effect on the next step; its bias correction uses them (1 - beta1'^t, as
// PyTorch and DeepSpeed compute it after a schedule changes the betas).
BOOST_AUTO_TEST_CASE(adamw_betas_are_settable) {
  const double lr = 0.1, eps = 1e-8;
  Tensor p = param({1.0});
  optim::AdamW opt({{{p}, 0.0}}, {.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = eps});
  give_grad(p, {1.0});
  opt.step();  // a sign step: p1 = 1 - lr/(1 + eps)
  opt.set_betas(0.5, 0.9);
  give_grad(p, {-1.0});
  opt.step();
  // m2 = 0.5·0.1 - 0.5 = -0.45, v2 = 0.9·0.001 + 0.1 = 0.1009;
  // p2 = p1 - lr/(1 - 0.25) m2 / (sqrt(v2)/sqrt(1 - 0.81) + eps)
  const double p1 = 1 - lr / (1 + eps), m2 = 0.5 * 0.1 - 0.5, v2 = 0.9 * 0.001 + 0.1;
  check_close(p, {p1 - lr / 0.75 * m2 / (std::sqrt(v2) / std::sqrt(0.19) + eps)}, 1e-14, "p");
  check_close(opt.exp_avg(0), {-0.45}, 1e-15, "exp_avg");
  check_close(opt.exp_avg_sq(0), {0.1009}, 1e-15, "exp_avg_sq");
  expect_error([&] { opt.set_betas(1.0, 0.9); }, "beta1 must be in [0, 1), got 1");
}

BOOST_AUTO_TEST_CASE(adamw_groups_have_their_own_weight_decay_and_lr_is_settable) {
  Tensor a = param({2.0}), b = param({2.0});
  optim::AdamW opt({{{a}, 0.5}, {{b}, 0.0}}, {.lr = 0.1});
  give_grad(a, {1.0});
  give_grad(b, {1.0});
  opt.step();
  check_close(a, {2.0 * (1 - 0.05) - 0.1 / (1 + 1e-8)}, 1e-14, "decayed");
  check_close(b, {2.0 - 0.1 / (1 + 1e-8)}, 1e-14, "undecayed");
  // A new lr takes effect on the next step (and scales the decay too).
  opt.set_lr(0.01);
  BOOST_TEST(opt.lr() == 0.01);
  const double a1 = a.item();
  give_grad(a, {1.0});
  give_grad(b, {1.0});
  opt.step();
  // Constant gradient: m̂ = 1, v̂ = 1 at every step, so the step is lr/(1 + eps).
  check_close(a, {a1 * (1 - 0.01 * 0.5) - 0.01 / (1 + 1e-8)}, 1e-14, "decayed, step 2");
}

BOOST_AUTO_TEST_CASE(adamw_skips_parameters_without_gradient) {
  Tensor a = param({1.0, 2.0}), b = param({3.0, 4.0});
  optim::AdamW opt({{{a, b}, 0.1}}, {.lr = 0.1});
  give_grad(a, {0.5, -0.5});
  opt.step();
  // b had no gradient: untouched, weight decay included (PyTorch skips it entirely).
  BOOST_TEST(b.to_vector<double>() == (std::vector<double>{3.0, 4.0}), boost::test_tools::per_element());
  check_close(a, {1.0 * 0.99 - 0.1 / (1 + 2e-8), 2.0 * 0.99 + 0.1 / (1 + 2e-8)}, 1e-14, "a");
  // zero_grad drops the gradients; a step then changes nothing.
  opt.zero_grad();
  BOOST_TEST(!grad(a).defined());
  const std::vector<double> a1 = a.to_vector<double>();
  opt.step();
  BOOST_TEST(a.to_vector<double>() == a1, boost::test_tools::per_element());
  BOOST_TEST(b.to_vector<double>() == (std::vector<double>{3.0, 4.0}), boost::test_tools::per_element());
}

// PyTorch keeps a step count per parameter, advanced only when the parameter is updated: a
// parameter's first update is bias-corrected as a first step however many steps came before
// (otherwise m, still mostly zero, is under-corrected and the update too small).
BOOST_AUTO_TEST_CASE(adamw_bias_correction_counts_each_parameters_own_updates) {
  Tensor a = param({1.0}), b = param({1.0});
  optim::AdamW opt({{{a, b}, 0.0}}, {.lr = 0.1});
  give_grad(a, {1.0});
  opt.step();  // b skipped
  give_grad(a, {1.0});
  give_grad(b, {2.0});
  opt.step();  // b's first update: a sign step of size lr
  check_close(b, {1.0 - 0.1 * 2.0 / (2.0 + 1e-8)}, 1e-12, "b after its first update");
  check_close(a, {1.0 - 2 * 0.1 / (1 + 1e-8)}, 1e-12, "a after two updates");
}

BOOST_AUTO_TEST_CASE(decay_groups_split_by_dimension) {
  const Tensor w2 = Tensor::zeros({3, 4}), b1 = Tensor::zeros({4}), w3 = Tensor::zeros({2, 2, 2}),
               s0 = Tensor::scalar(1.0), b1b = Tensor::zeros({3});
  const auto groups = optim::decay_groups({w2, b1, w3, s0, b1b}, 0.1);
  BOOST_TEST_REQUIRE(groups.size() == 2u);
  BOOST_TEST(groups[0].weight_decay == 0.1);
  BOOST_TEST(groups[1].weight_decay == 0.0);
  BOOST_TEST_REQUIRE(groups[0].params.size() == 2u);
  BOOST_TEST(groups[0].params[0].is_same(w2));
  BOOST_TEST(groups[0].params[1].is_same(w3));
  BOOST_TEST_REQUIRE(groups[1].params.size() == 3u);
  BOOST_TEST(groups[1].params[0].is_same(b1));
  BOOST_TEST(groups[1].params[1].is_same(s0));
  BOOST_TEST(groups[1].params[2].is_same(b1b));

  // On a GPT: every matrix and embedding decays, every bias and LayerNorm parameter does not.
  nn::GPTConfig c{.n_layer = 1, .n_head = 2, .d_model = 8, .seq_len = 4, .vocab_size = 5};
  nn::GPT model(c);
  const auto g = optim::decay_groups(model.parameters(), 0.1);
  BOOST_TEST(g[0].params.size() == 2u + 4u);       // wte, wpe, qkv, attn.proj, fc, mlp.proj
  BOOST_TEST(g[1].params.size() == 4u + 4u + 2u);  // 4 Linear biases, 2 LayerNorms, ln_f
}

// ---------------------------------------------------------------------------------------
// SGD over three steps with gradients g1, g2, g3 that do not depend on p.

namespace {
const std::vector<double> kP0{1.0, -1.0};
const std::vector<std::vector<double>> kGrads{{1.0, -2.0}, {0.5, 1.0}, {-1.0, 0.5}};

Tensor run_sgd(const optim::SGDOptions& o, double wd) {
  Tensor p = param(kP0);
  optim::SGD opt({{{p}, wd}}, o);
  for (const auto& g : kGrads) {
    give_grad(p, g);
    opt.step();
  }
  return p;
}
}  // namespace

BOOST_AUTO_TEST_CASE(sgd_plain) {
  // p3 = p0 - lr (g1 + g2 + g3) = [1 - 0.1·0.5, -1 - 0.1·(-0.5)] = [0.95, -0.95]
  check_close(run_sgd({.lr = 0.1}, 0.0), {0.95, -0.95}, 1e-15, "p");
}

BOOST_AUTO_TEST_CASE(sgd_momentum) {
  // buf1 = g1, buf2 = 0.9 g1 + g2, buf3 = 0.81 g1 + 0.9 g2 + g3; p3 = p0 - lr Σ buf
  //   = p0 - lr (2.71 g1 + 1.9 g2 + g3) -> [1 - 0.1·2.66, -1 - 0.1·(-3.02)] = [0.734, -0.698]
  check_close(run_sgd({.lr = 0.1, .momentum = 0.9}, 0.0), {0.734, -0.698}, 1e-14, "p");
}

BOOST_AUTO_TEST_CASE(sgd_momentum_with_dampening) {
  // buf1 = g1 (no dampening on the first step, as PyTorch), buf2 = 0.9 g1 + 0.5 g2,
  // buf3 = 0.81 g1 + 0.45 g2 + 0.5 g3; Σ = 2.71 g1 + 0.95 g2 + 0.5 g3 = [2.685, -4.22]
  check_close(run_sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, 0.0), {1 - 0.2685, -1 + 0.422}, 1e-14, "p");
}

BOOST_AUTO_TEST_CASE(sgd_nesterov) {
  // d_k = g_k + 0.9 buf_k: Σ d = (g1+g2+g3) + 0.9 (2.71 g1 + 1.9 g2 + g3)
  //   = 3.439 g1 + 2.71 g2 + 1.9 g3 = [3.439 + 1.355 - 1.9, -6.878 + 2.71 + 0.95] = [2.894, -3.218]
  check_close(run_sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true}, 0.0), {1 - 0.2894, -1 + 0.3218}, 1e-14, "p");
}

BOOST_AUTO_TEST_CASE(sgd_weight_decay_is_l2_in_the_gradient) {
  // p_k = p_{k-1} - lr (g_k + wd p_{k-1}) = 0.99 p_{k-1} - 0.1 g_k, wd = 0.1:
  //   entry 0: 0.99 - 0.1 = 0.89; 0.8811 - 0.05 = 0.8311; 0.822789 + 0.1 = 0.922789
  //   entry 1: -0.99 + 0.2 = -0.79; -0.7821 - 0.1 = -0.8821; -0.873279 - 0.05 = -0.923279
  check_close(run_sgd({.lr = 0.1}, 0.1), {0.922789, -0.923279}, 1e-14, "p");
  // With momentum the decayed gradient goes into the buffer:
  //   d1 = g1 + 0.1 p0, buf1 = d1; p1 = p0 - 0.1 buf1, and so on (closed form below).
  std::vector<double> p = kP0, buf(2);
  for (size_t k = 0; k < kGrads.size(); ++k)
    for (int i = 0; i < 2; ++i) {
      const double d = kGrads[k][i] + 0.1 * p[i];
      buf[i] = k == 0 ? d : 0.9 * buf[i] + d;
      p[i] -= 0.1 * buf[i];
    }
  check_close(run_sgd({.lr = 0.1, .momentum = 0.9}, 0.1), p, 1e-14, "p (momentum + decay)");
}

BOOST_AUTO_TEST_CASE(sgd_skips_parameters_without_gradient) {
  Tensor a = param({1.0}), b = param({5.0});
  optim::SGD opt({{{a, b}, 0.1}}, {.lr = 0.1, .momentum = 0.9});
  give_grad(a, {1.0});
  opt.step();
  BOOST_TEST(b.item() == 5.0);  // no gradient: no decay, no momentum
  check_close(a, {1.0 - 0.1 * 1.1}, 1e-15, "a");
}

// ---------------------------------------------------------------------------------------
// Invalid options

BOOST_AUTO_TEST_CASE(invalid_optimizer_options_throw) {
  Tensor p = param({1.0});
  expect_error([&] { optim::AdamW({{{p}, 0.0}}, {.lr = -1e-3}); }, "lr");
  expect_error([&] { optim::AdamW({{{p}, 0.0}}, {.lr = std::nan("")}); }, "lr");
  expect_error([&] { optim::AdamW({{{p}, 0.0}}, {.lr = INFINITY}); }, "lr");
  expect_error([&] { optim::AdamW({{{p}, 0.0}}, {.beta1 = 1.0}); }, "beta1");
  expect_error([&] { optim::AdamW({{{p}, 0.0}}, {.beta1 = -0.1}); }, "beta1");
  expect_error([&] { optim::AdamW({{{p}, 0.0}}, {.beta2 = 1.0}); }, "beta2");
  expect_error([&] { optim::AdamW({{{p}, 0.0}}, {.eps = 0.0}); }, "eps");
  expect_error([&] { optim::AdamW({{{p}, -0.1}}, {}); }, "weight_decay");
  expect_error([&] { optim::SGD({{{p}, 0.0}}, {.lr = -1.0}); }, "lr");
  expect_error([&] { optim::SGD({{{p}, 0.0}}, {.momentum = -0.5}); }, "momentum");
  expect_error([&] { optim::SGD({{{p}, 0.0}}, {.nesterov = true}); }, "nesterov");
  expect_error([&] { optim::SGD({{{p}, 0.0}}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); }, "nesterov");
  expect_error([&] { optim::SGD({{{p}, -1.0}}, {}); }, "weight_decay");
  BOOST_CHECK_NO_THROW(optim::SGD({{{p}, 0.0}}, {.momentum = 0.9, .nesterov = true}));
  BOOST_CHECK_NO_THROW(optim::AdamW({{{p}, 0.1}}, {.lr = 0.0}));
}

// ---------------------------------------------------------------------------------------
// Schedules

BOOST_AUTO_TEST_CASE(warmup_cosine_values) {
  const optim::WarmupCosineLR s(1.0, 0.1, 10, 110);
  // Warmup: max (s+1)/10.
  BOOST_TEST(std::fabs(s.lr_at(0) - 0.1) < 1e-15);
  BOOST_TEST(std::fabs(s.lr_at(4) - 0.5) < 1e-15);
  BOOST_TEST(std::fabs(s.lr_at(9) - 1.0) < 1e-15);
  // Decay over steps 10..110: min + (max - min)(1 + cos(pi progress))/2.
  BOOST_TEST(std::fabs(s.lr_at(10) - 1.0) < 1e-15);                                  // progress 0
  BOOST_TEST(std::fabs(s.lr_at(35) - (0.1 + 0.45 * (1 + std::sqrt(0.5)))) < 1e-12);  // progress 1/4
  BOOST_TEST(std::fabs(s.lr_at(60) - 0.55) < 1e-12);                                 // midpoint
  BOOST_TEST(std::fabs(s.lr_at(85) - (0.1 + 0.45 * (1 - std::sqrt(0.5)))) < 1e-12);  // progress 3/4
  BOOST_TEST(std::fabs(s.lr_at(109) - (0.1 + 0.45 * (1 + std::cos(M_PI * 0.99)))) < 1e-12);
  BOOST_TEST(s.lr_at(109) > 0.1);
  // End and past the end: min.
  BOOST_TEST(s.lr_at(110) == 0.1);
  BOOST_TEST(s.lr_at(111) == 0.1);
  BOOST_TEST(s.lr_at(1000000) == 0.1);
  // Monotone: up through warmup, then down.
  for (int64_t k = 1; k < 10; ++k) BOOST_TEST(s.lr_at(k) > s.lr_at(k - 1), "step " << k);
  for (int64_t k = 11; k <= 110; ++k) BOOST_TEST(s.lr_at(k) < s.lr_at(k - 1), "step " << k);

  // No warmup: starts at max; warmup == total: max then min.
  const optim::WarmupCosineLR nw(2.0, 0.0, 0, 4);
  BOOST_TEST(nw.lr_at(0) == 2.0);
  BOOST_TEST(std::fabs(nw.lr_at(2) - 1.0) < 1e-15);
  BOOST_TEST(nw.lr_at(4) == 0.0);
  const optim::WarmupCosineLR flat(1.0, 0.5, 2, 2);
  BOOST_TEST(flat.lr_at(0) == 0.5);
  BOOST_TEST(flat.lr_at(1) == 1.0);
  BOOST_TEST(flat.lr_at(2) == 0.5);
}

BOOST_AUTO_TEST_CASE(constant_lr_values) {
  const optim::ConstantLR plain(0.3);
  BOOST_TEST(plain.lr_at(0) == 0.3);
  BOOST_TEST(plain.lr_at(12345) == 0.3);
  const optim::ConstantLR warm(0.5, 4);
  BOOST_TEST(warm.lr_at(0) == 0.125);
  BOOST_TEST(warm.lr_at(1) == 0.25);
  BOOST_TEST(warm.lr_at(2) == 0.375);
  BOOST_TEST(warm.lr_at(3) == 0.5);
  BOOST_TEST(warm.lr_at(4) == 0.5);
  BOOST_TEST(warm.lr_at(1000) == 0.5);
}

BOOST_AUTO_TEST_CASE(invalid_schedules_throw) {
  expect_error([] { optim::ConstantLR(-0.1); }, "lr");
  expect_error([] { optim::ConstantLR(0.1, -1); }, "warmup_steps");
  expect_error([] { optim::WarmupCosineLR(0.1, 0.2, 0, 10); }, "min_lr");
  expect_error([] { optim::WarmupCosineLR(-0.1, 0.0, 0, 10); }, "max_lr");
  expect_error([] { optim::WarmupCosineLR(0.1, 0.0, 11, 10); }, "warmup_steps");
  expect_error([] { optim::WarmupCosineLR(0.1, 0.0, -1, 10); }, "warmup_steps");
}

// ---------------------------------------------------------------------------------------
// Gradient clipping

BOOST_AUTO_TEST_CASE(clip_grad_norm_scales_to_max_norm) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = param({0, 0}, dt), b = param({0}, dt), none = param({7}, dt);
    give_grad(a, {3.0, 4.0});
    give_grad(b, {12.0});
    const std::vector<Tensor> ps{a, b, none};  // `none` has no gradient and is ignored
    BOOST_TEST(std::fabs(optim::grad_norm(ps) - 13.0) < 1e-12);
    const double norm = optim::clip_grad_norm(ps, 1.0);
    BOOST_TEST(std::fabs(norm - 13.0) < 1e-12);  // the norm before clipping
    BOOST_TEST(std::fabs(optim::grad_norm(ps) - 1.0) < 1e-6);
    // Direction kept: each entry is g/13.
    const double tol = dt == DType::f64 ? 1e-7 : 2e-7;
    check_close(grad(a), {3.0 / 13, 4.0 / 13}, tol, "a");
    check_close(grad(b), {12.0 / 13}, tol, "b");
    BOOST_TEST(!grad(none).defined());
  }
}

BOOST_AUTO_TEST_CASE(clip_grad_norm_leaves_small_gradients_alone) {
  Tensor a = param({0, 0}), b = param({0});
  give_grad(a, {3.0, 4.0});
  give_grad(b, {12.0});
  const double norm = optim::clip_grad_norm({a, b}, 20.0);
  BOOST_TEST(std::fabs(norm - 13.0) < 1e-12);
  BOOST_TEST(grad(a).to_vector<double>() == (std::vector<double>{3.0, 4.0}), boost::test_tools::per_element());
  BOOST_TEST(grad(b).item() == 12.0);
  // Large norms: the same rule, to within 1e-6 of max_norm.
  give_grad(a, {3e4, 4e4});
  give_grad(b, {0.0});
  BOOST_TEST(std::fabs(optim::clip_grad_norm({a, b}, 0.5) - 5e4) < 1e-7);
  BOOST_TEST(std::fabs(optim::grad_norm({a, b}) - 0.5) < 1e-6);
  expect_error([&] { optim::clip_grad_norm({a, b}, 0.0); }, "max norm");
  // Nothing to clip: norm 0, no error.
  Tensor c = param({1.0});
  BOOST_TEST(optim::clip_grad_norm({c}, 1.0) == 0.0);
}

// An inf or NaN in any gradient makes the norm non-finite (the overflow test of fp16).
BOOST_AUTO_TEST_CASE(grad_norm_of_an_inf_or_nan_is_not_finite) {
  for (float bad : {INFINITY, NAN}) {
    Tensor a = param({0, 0}), b = param({0, 0});
    give_grad(a, {3.0, 4.0});
    give_grad(b, {1.0, double(bad)});
    BOOST_TEST(!std::isfinite(optim::grad_norm({a, b})), bad);
  }
}

BOOST_AUTO_TEST_CASE(clip_coefficient_is_pytorchs_rule) {
  BOOST_TEST(optim::clip_coefficient(13.0, 1.0) == 1.0 / (13.0 + 1e-6));
  BOOST_TEST(optim::clip_coefficient(13.0, 20.0) == 1.0);
  BOOST_TEST(optim::clip_coefficient(13.0, 13.0) == 13.0 / (13.0 + 1e-6));
  BOOST_TEST(optim::clip_coefficient(13.0, 0.0) == 1.0);  // off
  BOOST_TEST(optim::clip_coefficient(INFINITY, 1.0) == 0.0);
  BOOST_TEST(optim::clip_coefficient(NAN, 1.0) == 1.0);
  const Tensor a = Tensor::from_vector(std::vector<double>{3, 4}, {2});
  const Tensor b = Tensor::from_vector(std::vector<double>{12}, {1});
  optim::clip_grads({a, b}, 13.0, 26.0);
  BOOST_TEST(a.to_vector<double>() == (std::vector<double>{3, 4}), boost::test_tools::per_element());
  optim::clip_grads({a, b}, 13.0, 6.5);
  const double coef = 6.5 / (13.0 + 1e-6);
  BOOST_TEST(a.to_vector<double>() == (std::vector<double>{3 * coef, 4 * coef}), boost::test_tools::per_element());
  BOOST_TEST(b.item() == 12 * coef);
}

// DeepSpeed's dynamic loss scale, step by step: hysteresis 2 halves on the second overflow
// (and then on each, until clean steps refill it), a window of 3 clean steps doubles, never
// below min_scale; consecutive_hysteresis refills after every clean step.
BOOST_AUTO_TEST_CASE(loss_scaler_follows_deepspeeds_rule) {
  optim::LossScaler s({.dynamic = true, .initial_scale = 64, .window = 3, .hysteresis = 2, .min_scale = 16});
  const std::vector<std::pair<bool, double>> steps = {
      {true, 64},  {true, 32},  {true, 16}, {true, 16},   // the first overflow uses up the hysteresis
      {false, 16}, {false, 16}, {false, 32},            // three clean steps double and refill it
      {true, 32},  {false, 32}, {true, 16}, {false, 16}};  // without consecutive_hysteresis both count
  for (size_t i = 0; i < steps.size(); ++i) {
    s.update(steps[i].first);
    BOOST_TEST(s.scale() == steps[i].second, "step " << i);
  }
  optim::LossScaler c({.dynamic = true, .initial_scale = 64, .window = 100, .hysteresis = 2,
                       .consecutive_hysteresis = true});
  for (bool overflow : {true, false, true, false, true}) c.update(overflow);
  BOOST_TEST(c.scale() == 64.0);  // no two overflows in a row
  c.update(true);
  BOOST_TEST(c.scale() == 32.0);

  optim::LossScaler fixed({.static_scale = 1024});
  fixed.update(true);
  fixed.set_state({.scale = 8, .hysteresis_left = 1, .clean_steps = 4});
  BOOST_TEST(fixed.scale() == 1024.0);  // a static scale stays
  BOOST_TEST(optim::LossScaler().scale() == 1.0);
  s.set_state({.scale = 4096, .hysteresis_left = 1, .clean_steps = 2});
  s.update(false);
  BOOST_TEST(s.scale() == 8192.0);  // the restored counters: the third clean step doubles
  test::check_error([&] { s.set_state({.scale = 0}); }, {"loss scaler", "scale 0"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_optim
