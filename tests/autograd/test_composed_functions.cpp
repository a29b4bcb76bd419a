// The composed functions of autograd/functions.h (log_sigmoid, clamp, maximum,
// masked_mean) on small hand-made tensors, against their formulas: values, the gradients
// PyTorch gives at their kinks, and the errors a bad mask gets. Their finite-difference
// checks are test_gradcheck's.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/meta.h"
#include "support/check.h"

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
