// The composed functions of autograd/functions.h (log_sigmoid, clamp, maximum,
// masked_mean, fake_quantize) on small hand-made tensors, against their formulas: values, the gradients
// PyTorch gives at their kinks, and the errors a bad mask gets; the fused classifier
// (autograd/fused_classifier.h) against the linear + cross_entropy it fuses. Their
// finite-difference checks are test_gradcheck's.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/fake_quantize.h"
#include "autograd/functions.h"
#include "autograd/fused_classifier.h"
#include "autograd/meta.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_composed_functions)

using namespace triad;

namespace {

// An f64 tensor of the values v; with `leaf`, one that requires grad.
Tensor f64(const std::vector<double>& v, const Shape& s, bool leaf = false) {
  Tensor t = Tensor::from_vector(v, s);
  if (leaf) set_requires_grad(t);
  return t;
}
std::vector<double> values(const Tensor& t) { return ops::to(t, DType::f64).to_vector<double>(); }
double softplus(double x) { return std::log1p(std::exp(x)); }  // -log sigmoid(-x)
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

BOOST_AUTO_TEST_CASE(log_sigmoid_is_stable_and_its_gradient_is_sigmoid_of_minus_x) {
  const Tensor x = f64({0.0, 2.0, -3.0, 800.0, -800.0}, {5}, true);
  const std::vector<double> y = values(log_sigmoid(x));
  BOOST_TEST(y[0] == -std::log(2.0), boost::test_tools::tolerance(1e-15));
  BOOST_TEST(y[1] == -softplus(-2.0), boost::test_tools::tolerance(1e-15));
  BOOST_TEST(y[2] == -softplus(3.0), boost::test_tools::tolerance(1e-15));
  BOOST_TEST(y[3] == 0.0);
  BOOST_TEST(y[4] == -800.0, boost::test_tools::tolerance(1e-15));
  backward(sum(log_sigmoid(x)));
  const std::vector<double> g = values(grad(x));
  const std::vector<double> expected = {0.5, sigmoid(-2.0), sigmoid(3.0), 0.0, 1.0};
  for (size_t i = 0; i < g.size(); ++i) BOOST_TEST(g[i] == expected[i], boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(clamp_and_maximum_follow_torch_at_their_kinks) {
  const Tensor x = f64({0.5, 0.8, 1.0, 1.2, 1.5}, {5}, true);
  const Tensor y = clamp(x, 0.8, 1.2);
  BOOST_TEST(values(y) == std::vector<double>({0.8, 0.8, 1.0, 1.2, 1.2}), boost::test_tools::per_element());
  backward(sum(y));
  BOOST_TEST(values(grad(x)) == std::vector<double>({0, 1, 1, 1, 0}), boost::test_tools::per_element());

  const Tensor a = f64({1, 2, 3}, {3}, true), b = f64({3, 2, 1}, {3}, true);
  const Tensor m = maximum(a, b);
  BOOST_TEST(values(m) == std::vector<double>({3, 2, 3}), boost::test_tools::per_element());
  backward(sum(m));
  BOOST_TEST(values(grad(a)) == std::vector<double>({0, 0.5, 1}), boost::test_tools::per_element());
  BOOST_TEST(values(grad(b)) == std::vector<double>({1, 0.5, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(masked_mean_divides_by_the_mask_sum) {
  const Tensor x = f64({1, 2, 3, 4}, {2, 2}, true);
  const Tensor loss = masked_mean(x, f64({1, 0, 1, 1}, {2, 2}), "test");
  BOOST_TEST(loss.item() == 8.0 / 3.0, boost::test_tools::tolerance(1e-15));
  backward(loss);
  const std::vector<double> g = values(grad(x)), expected = {1.0 / 3, 0, 1.0 / 3, 1.0 / 3};
  BOOST_REQUIRE_EQUAL(g.size(), expected.size());
  for (size_t i = 0; i < g.size(); ++i) BOOST_TEST(std::fabs(g[i] - expected[i]) <= 1e-15, "element " << i);
  test::check_error([&] { masked_mean(x, f64({0, 0, 0, 0}, {2, 2}), "test"); }, {"test", "selects no token"});
  test::check_error([&] { masked_mean(x, f64({1, 1}, {2}), "test"); }, {"test", "(2, 2)", "(2,)"});
}

BOOST_AUTO_TEST_CASE(fake_quantize_rounds_to_the_format_and_passes_the_gradient_straight_through) {
  // Row 0 in two groups of 4 at 4 bits: scales 7/7 = 1 and 3.5/7 = 0.5.
  // Row 1: group max 14 (scale 2), then 0.7 (scale 0.1).
  Tensor w = Tensor::from_vector(std::vector<float>{7.0f, -2.4f, 0.5f, 3.6f, 3.5f, 0.2f, -1.3f, 0.74f,  //
                                                    14.0f, 5.0f, -3.1f, 0.9f, -0.7f, 0.26f, 0.04f, 0.33f},
                                 {2, 8});
  set_requires_grad(w);
  const std::vector<float> expected = {7, -2, 0, 4, 3.5f, 0, -1.5f, 0.5f, 14, 4, -4, 0, -0.7f, 0.3f, 0, 0.3f};
  const Tensor y = fake_quantize(w, QuantFormat{4, 4, true});
  const std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == expected[i], boost::test_tools::tolerance(1e-6f));
  // d/dw sum(c * fq(w)) = c under the straight-through estimator, rounding or not.
  std::vector<float> c(16);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 0.25f * float(i) - 1.5f;
  backward(sum(mul(y, Tensor::from_vector(c, {2, 8}))));
  const std::vector<float> g = grad(w).to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) BOOST_TEST(g[i] == c[i]);
}

BOOST_AUTO_TEST_CASE(fake_quantize_binary_has_a_scale_per_row_and_ternary_three_levels) {
  const Tensor w = Tensor::from_vector(std::vector<float>{1.0f, -3.0f, 0.5f, -0.5f, 1.0f, -3.0f, 0.5f, -0.5f,  //
                                                          2.0f, 2.0f, -2.0f, 6.0f, 2.0f, 2.0f, -2.0f, 6.0f},
                                       {2, 8});
  // Binary, one group per row (XTC): sign(w) * mean |w| of the row (1.25 and 3).
  const std::vector<float> b = fake_quantize(w, QuantFormat{1, 8, true}).to_vector<float>();
  const std::vector<float> b_expected = {1.25f, -1.25f, 1.25f, -1.25f, 1.25f, -1.25f, 1.25f, -1.25f,
                                         3,     3,      -3,    3,      3,     3,      -3,    3};
  for (size_t i = 0; i < b.size(); ++i) BOOST_TEST(b[i] == b_expected[i]);
  // Ternary (TWN, XTC's): |w| above 0.7 mean |w| (0.875 and 2.1) keeps its sign, times the
  // mean |w| of those (2 and 6); the rest is 0.
  Tensor leaf = ops::clone(w);
  set_requires_grad(leaf);
  const Tensor ty = fake_quantize(leaf, QuantFormat{2, 8, true});
  const std::vector<float> t = ty.to_vector<float>();
  const std::vector<float> t_expected = {2, -2, 0, 0, 2, -2, 0, 0, 0, 0, 0, 6, 0, 0, 0, 6};
  for (size_t i = 0; i < t.size(); ++i) BOOST_TEST(t[i] == t_expected[i]);
  // Straight through, at zeros and at levels alike: d/dw sum(c * fq(w)) = c, both formats.
  std::vector<float> c(16);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 0.5f * float(i) - 3.0f;
  const Tensor cw = Tensor::from_vector(c, {2, 8});
  Tensor bleaf = ops::clone(w);
  set_requires_grad(bleaf);
  backward(add(sum(mul(ty, cw)), sum(mul(fake_quantize(bleaf, QuantFormat{1, 8, true}), cw))));
  const std::vector<float> g = grad(leaf).to_vector<float>(), gb = grad(bleaf).to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) BOOST_TEST((g[i] == c[i] && gb[i] == c[i]), "element " << i);
}

BOOST_AUTO_TEST_CASE(fake_quantize_names_a_bad_format) {
  const Tensor w = Tensor::zeros({2, 8});
  test::check_error([&] { fake_quantize(w, QuantFormat{3, 8, true}); }, {"fake_quantize", "bits 3", "8, 4, 2 or 1"});
  test::check_error([&] { fake_quantize(w, QuantFormat{8, 3, true}); }, {"group size 3", "does not divide", "8"});
}

namespace {

struct LossAndGrads {
  Tensor loss, dx, dw;
};

// The loss of x (13, 6) and w (11, 6) against 13 targets, two of them ignored, over the 9
// classes of w's rows (2 padding rows), and its gradients when the loss is scaled by 0.75;
// fused in chunks of chunk_rows, or as linear + cross_entropy when chunk_rows < 0.
LossAndGrads classifier_loss(DType dt, int64_t chunk_rows) {
  Generator gen(7);
  Tensor x = Tensor::empty({13, 6}), w = Tensor::empty({11, 6});
  ops::normal_(x, 0.0, 1.0, gen);
  ops::normal_(w, 0.0, 1.0, gen);
  x = ops::to(x, dt), w = ops::to(w, dt);
  set_requires_grad(x), set_requires_grad(w);
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{3, 8, -100, 0, 5, 1, 7, 2, -100, 6, 4, 8, 0}, {13});
  const Tensor loss = chunk_rows < 0 ? cross_entropy(linear(x, w), targets, -100, 9)
                                     : linear_cross_entropy(x, w, targets, -100, {.classes = 9}, chunk_rows);
  backward(mul(loss, 0.75));
  return {loss, grad(x), grad(w)};
}

}  // namespace

// f32: the same per-row log-sum-exp and target logit summed in f64 give the same loss; the
// gradients differ only in the order d(weight) sums its rows (within 4 ulps). bf16 (Note
// [16-bit activations]): the same loss; d(x) rounded once as before, d(weight) once per
// chunk (half a bf16 ulp, 2^-9, each: the first chunk's product, then each later chunk's
// accumulating GEMM, ops::add_matmul_) where linear's backward rounds once.
BOOST_AUTO_TEST_CASE(linear_cross_entropy_equals_linear_and_cross_entropy) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const LossAndGrads want = classifier_loss(dt, -1);
    for (int64_t chunk : {4, 1, 0}) {  // 4 does not divide 13; 0: one chunk of all rows
      BOOST_TEST_CONTEXT(dtype_name(dt) << ", chunks of " << chunk << " rows") {
        const LossAndGrads got = classifier_loss(dt, chunk);
        BOOST_TEST((got.loss.dtype() == DType::f32 && got.dx.dtype() == dt && got.dw.dtype() == dt));
        BOOST_TEST(got.loss.item() == want.loss.item());
        const int64_t chunks = chunk == 0 ? 1 : (13 + chunk - 1) / chunk;
        const double tol = dt == DType::f32 ? 4 * 0x1p-23 : 0x1p-9 * double(chunks + 1);
        BOOST_TEST(test::relative_error(got.dx, want.dx) <= tol);
        BOOST_TEST(test::relative_error(got.dw, want.dw) <= tol);
        // Ignored rows pass no gradient, padding rows of the weight get none.
        for (int64_t row : {2, 8}) BOOST_TEST(ops::max_abs(ops::select(got.dx, 0, row)) == 0.0);
        BOOST_TEST(ops::max_abs(ops::narrow(got.dw, 0, 9, 2)) == 0.0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_cross_entropy_names_bad_arguments) {
  const Tensor x = Tensor::zeros({4, 3}), w = Tensor::zeros({5, 3});
  const Tensor t = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3}, {4});
  test::check_error([&] { linear_cross_entropy(x, Tensor::zeros({5, 2}), t); },
                    {"linear_cross_entropy", "(4, 3)", "(5, 2)"});
  test::check_error([&] { linear_cross_entropy(x, w, t, -100, {.classes = 6}); },
                    {"linear_cross_entropy", "5 rows", "[0, 6)"});
  test::check_error([&] { linear_cross_entropy(x, w, Tensor::from_vector(std::vector<int64_t>{0, 1, 7, 3}, {4})); },
                    {"classifier_rows", "index 7", "[0, 5)"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_composed_functions
