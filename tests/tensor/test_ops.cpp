// Forward values of the raw ops on small cases with hand-computed or closed-form results, in
// f32 and f64; the fused ops against the compositions they replace; random fills and dropout
// masks checked for their distribution, replay and independence from the OpenMP thread count.
#include <omp.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "support/check.h"
#include "tensor/ops.h"

BOOST_AUTO_TEST_SUITE(test_ops)

using namespace triad;

namespace {

const std::vector<DType> kFloat = {DType::f32, DType::f64};

Tensor make(const std::vector<double>& v, const Shape& shape, DType dt) {
  return ops::to(Tensor::from_vector(v, shape), dt);
}

Tensor idx(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

double tol(DType dt) { return dt == DType::f64 ? 1e-13 : 2e-6; }

// Every element of t (any layout) against `expected` (row-major), relative to max(1, |e|).
void check_values(const Tensor& t, const Shape& shape, const std::vector<double>& expected, double tolerance,
                  const std::string& what) {
  BOOST_REQUIRE_MESSAGE(t.shape() == shape,
                        what << ": shape " << shape_str(t.shape()) << ", expected " << shape_str(shape));
  const std::vector<double> got = t.to_vector<double>();
  BOOST_REQUIRE_EQUAL(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - expected[i]) / std::max(1.0, std::fabs(expected[i]));
    BOOST_TEST(err <= tolerance, what << " [" << i << "]: " << got[i] << " vs " << expected[i]);
  }
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

}  // namespace

BOOST_AUTO_TEST_CASE(elementwise_binary_with_broadcasting) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    const Tensor row = make({10, 20, 30}, {3}, dt);
    const Tensor col = make({1, 2}, {2, 1}, dt);
    check_values(ops::add(a, row), {2, 3}, {11, 22, 33, 14, 25, 36}, tol(dt), d + " add row");
    check_values(ops::add(row, a), {2, 3}, {11, 22, 33, 14, 25, 36}, tol(dt), d + " row add");
    check_values(ops::sub(a, row), {2, 3}, {-9, -18, -27, -6, -15, -24}, tol(dt), d + " sub row");
    check_values(ops::sub(row, a), {2, 3}, {9, 18, 27, 6, 15, 24}, tol(dt), d + " row sub");
    check_values(ops::mul(a, col), {2, 3}, {1, 2, 3, 8, 10, 12}, tol(dt), d + " mul col");
    check_values(ops::div(a, col), {2, 3}, {1, 2, 3, 2, 2.5, 3}, tol(dt), d + " div col");
    check_values(ops::div(row, a), {2, 3}, {10, 10, 10, 2.5, 4, 5}, tol(dt), d + " row div");
    // (2, 1) against (1, 3) and (3,): both operands broadcast.
    check_values(ops::add(col, ops::view(row, {1, 3})), {2, 3}, {11, 21, 31, 12, 22, 32}, tol(dt), d + " outer add");
    check_values(ops::mul(col, row), {2, 3}, {10, 20, 30, 20, 40, 60}, tol(dt), d + " outer mul");
    // A 0-d operand, and a leading batch dimension.
    check_values(ops::mul(a, Tensor::scalar(-2, dt)), {2, 3}, {-2, -4, -6, -8, -10, -12}, tol(dt), d + " scalar");
    const Tensor batch = make({1, 1, 1, 2, 2, 2}, {2, 1, 3}, dt);
    check_values(ops::mul(batch, a), {2, 2, 3}, {1, 2, 3, 4, 5, 6, 2, 4, 6, 8, 10, 12}, tol(dt), d + " batch");
    check_values(ops::add(a, 0.5), {2, 3}, {1.5, 2.5, 3.5, 4.5, 5.5, 6.5}, tol(dt), d + " add scalar");
    check_values(ops::mul(a, 0.25), {2, 3}, {0.25, 0.5, 0.75, 1, 1.25, 1.5}, tol(dt), d + " mul scalar");
    BOOST_TEST((ops::add(a, row).dtype() == dt));
  }
}

BOOST_AUTO_TEST_CASE(elementwise_unary_closed_forms) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const double e = std::exp(1.0), ln2 = std::log(2.0);
    check_values(ops::neg(make({1, -2, 0}, {3}, dt)), {3}, {-1, 2, 0}, tol(dt), d + " neg");
    check_values(ops::exp(make({0, 1, -1, ln2}, {4}, dt)), {4}, {1, e, 1 / e, 2}, tol(dt), d + " exp");
    check_values(ops::log(make({1, e, 0.5, 8}, {4}, dt)), {4}, {0, 1, -ln2, 3 * ln2}, tol(dt), d + " log");
    check_values(ops::sqrt(make({4, 0, 2.25, 1e-4}, {4}, dt)), {4}, {2, 0, 1.5, 1e-2}, tol(dt), d + " sqrt");
    // tanh x = (e^2x - 1) / (e^2x + 1)
    const double t05 = (std::exp(1.0) - 1) / (std::exp(1.0) + 1), t2 = (std::exp(4.0) - 1) / (std::exp(4.0) + 1);
    check_values(ops::tanh(make({0, 0.5, -2, 30}, {4}, dt)), {4}, {0, t05, -t2, 1}, tol(dt) * 4, d + " tanh");
    check_values(ops::relu(make({-1, 0, 2, -1e-30, 3.5}, {5}, dt)), {5}, {0, 0, 2, 0, 3.5}, 0, d + " relu");
    check_values(ops::pow(make({2, 3, -2, 4}, {4}, dt), 3.0), {4}, {8, 27, -8, 64}, tol(dt), d + " pow 3");
    check_values(ops::pow(make({4, 2.25, 0}, {3}, dt), 0.5), {3}, {2, 1.5, 0}, tol(dt), d + " pow 0.5");
    check_values(ops::pow(make({2, 0.5}, {2}, dt), -2.0), {2}, {0.25, 4}, tol(dt), d + " pow -2");
    // GELU (tanh form) at 0, 1, -1: 0, 0.8411919906..., -0.1588080094...
    const Tensor g = ops::gelu(make({0, 1, -1, 3, -5}, {5}, dt));
    check_values(g, {5}, {0, gelu_ref(1), gelu_ref(-1), gelu_ref(3), gelu_ref(-5)}, tol(dt) * 2, d + " gelu");
    BOOST_TEST(std::fabs(gelu_ref(1) - 0.8411919906082768) < 1e-15);
    BOOST_TEST(std::fabs(gelu_ref(-1) + 0.15880800939172324) < 1e-15);
    // relu_backward passes grad_y where y > 0.
    check_values(ops::relu_backward(make({0, 1, 0, 2}, {4}, dt), make({5, 6, 7, 8}, {4}, dt)), {4}, {0, 6, 0, 8}, 0,
                 d + " relu_backward");
    // gelu_backward against a central difference of the closed form (in double).
    const std::vector<double> xs = {0, 1, -1, 0.3, -2.5, 4};
    std::vector<double> dg;
    for (double x : xs) dg.push_back(2.0 * (gelu_ref(x + 1e-5) - gelu_ref(x - 1e-5)) / 2e-5);
    check_values(ops::gelu_backward(make(xs, {6}, dt), Tensor::full({6}, 2.0, dt)), {6}, dg,
                 dt == DType::f64 ? 1e-9 : 2e-6, d + " gelu_backward");
    BOOST_TEST(std::fabs(dg[0] - 1.0) < 1e-9);  // GELU'(0) = 1/2, times the incoming 2
  }
}

BOOST_AUTO_TEST_CASE(reductions) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const Tensor a = make({1, -2, 3, 4, 5, -6}, {2, 3}, dt);
    check_values(ops::sum(a), {}, {5}, tol(dt), d + " sum");
    check_values(ops::mean(a), {}, {5.0 / 6.0}, tol(dt), d + " mean");
    check_values(ops::sum(a, 0), {3}, {5, 3, -3}, tol(dt), d + " sum 0");
    check_values(ops::sum(a, 1), {2}, {2, 3}, tol(dt), d + " sum 1");
    check_values(ops::sum(a, -1, true), {2, 1}, {2, 3}, tol(dt), d + " sum -1 keepdim");
    check_values(ops::sum(a, 0, true), {1, 3}, {5, 3, -3}, tol(dt), d + " sum 0 keepdim");
    check_values(ops::mean(a, 0), {3}, {2.5, 1.5, -1.5}, tol(dt), d + " mean 0");
    check_values(ops::mean(a, 1, true), {2, 1}, {2.0 / 3.0, 1}, tol(dt), d + " mean 1 keepdim");
    check_values(ops::max(a, 0), {3}, {4, 5, 3}, 0, d + " max 0");
    check_values(ops::max(a, 1, true), {2, 1}, {3, 5}, 0, d + " max 1");
    check_values(ops::max(make({-3, -1, -2}, {3}, dt), 0), {}, {-1}, 0, d + " max of negatives");
    // A 3-d tensor over its middle dimension (outer 2, n 3, inner 2).
    const Tensor b = make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2}, dt);
    check_values(ops::sum(b, 1), {2, 2}, {6, 9, 24, 27}, tol(dt), d + " sum middle");
    check_values(ops::max(b, 1), {2, 2}, {4, 5, 10, 11}, 0, d + " max middle");
    check_values(ops::mean(b, 2), {2, 3}, {0.5, 2.5, 4.5, 6.5, 8.5, 10.5}, tol(dt), d + " mean last");
    // sum_to: the reverse of broadcasting.
    check_values(ops::sum_to(b, {3, 2}), {3, 2}, {6, 8, 10, 12, 14, 16}, tol(dt), d + " sum_to lead");
    check_values(ops::sum_to(b, {2, 1, 1}), {2, 1, 1}, {15, 51}, tol(dt), d + " sum_to keep");
    check_values(ops::sum_to(b, {1, 3, 1}), {1, 3, 1}, {14, 22, 30}, tol(dt), d + " sum_to middle");
    check_values(ops::sum_to(b, {2}), {2}, {30, 36}, tol(dt), d + " sum_to (2,)");
    check_values(ops::sum_to(b, {}), {}, {66}, tol(dt), d + " sum_to ()");
    check_values(ops::sum_to(b, {2, 3, 2}), {2, 3, 2}, b.to_vector<double>(), 0, d + " sum_to same");
    BOOST_TEST(ops::sum_squares({a}) == 91.0);
    BOOST_TEST(ops::sum_squares({a, ops::mul(a, 2.0), Tensor::empty({0}, dt)}) == 91.0 * 5);
    BOOST_TEST(ops::sum_squares({}) == 0.0);
    BOOST_TEST(ops::max_abs(a) == 6.0);
    BOOST_TEST(ops::all_finite(a));
    BOOST_TEST(!ops::all_finite(make({1, std::numeric_limits<double>::infinity()}, {2}, dt)));
    BOOST_TEST(!ops::all_finite(make({std::numeric_limits<double>::quiet_NaN(), 1}, {2}, dt)));
    BOOST_TEST(!ops::all_finite(make({1, -std::numeric_limits<double>::infinity()}, {2}, dt)));
    // Large sums accumulate accurately (1e5 copies of 0.1 in f32 would drift by far more).
    const Tensor many = Tensor::full({100000}, 0.1, dt);
    BOOST_TEST(std::fabs(ops::sum(many).item() - 10000.0) < (dt == DType::f64 ? 1e-8 : 2e-3));
  }
}

BOOST_AUTO_TEST_CASE(matmul_and_linear) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    const Tensor b = make({7, 8, 9, 10, 11, 12}, {3, 2}, dt);
    const std::vector<double> ab = {58, 64, 139, 154};
    check_values(ops::matmul(a, b), {2, 2}, ab, tol(dt), d + " 2x3 @ 3x2");
    const Tensor at = ops::contiguous(ops::transpose(a, 0, 1)), bt = ops::contiguous(ops::transpose(b, 0, 1));
    check_values(ops::matmul(at, b, true, false), {2, 2}, ab, tol(dt), d + " a^T");
    check_values(ops::matmul(a, bt, false, true), {2, 2}, ab, tol(dt), d + " b^T");
    check_values(ops::matmul(at, bt, true, true), {2, 2}, ab, tol(dt), d + " a^T b^T");
    check_values(ops::matmul(b, a), {3, 3}, {39, 54, 69, 49, 68, 87, 59, 82, 105}, tol(dt), d + " 3x2 @ 2x3");
    // Batched: batch 1 is batch 0 with a doubled and b negated.
    const Tensor a2 = make({1, 2, 3, 4, 5, 6, 2, 4, 6, 8, 10, 12}, {2, 2, 3}, dt);
    const Tensor b2 = make({7, 8, 9, 10, 11, 12, -7, -8, -9, -10, -11, -12}, {2, 3, 2}, dt);
    check_values(ops::matmul(a2, b2), {2, 2, 2}, {58, 64, 139, 154, -116, -128, -278, -308}, tol(dt), d + " batched");
    check_values(ops::matmul(a2, b), {2, 2, 2}, {58, 64, 139, 154, 116, 128, 278, 308}, tol(dt), d + " batched @ 2d");
    check_values(ops::matmul(a2, bt, false, true), {2, 2, 2}, {58, 64, 139, 154, 116, 128, 278, 308}, tol(dt),
                 d + " batched @ 2d^T");
    const Tensor a2t = ops::contiguous(ops::transpose(a2, 1, 2));
    check_values(ops::matmul(a2t, b, true, false), {2, 2, 2}, {58, 64, 139, 154, 116, 128, 278, 308}, tol(dt),
                 d + " batched^T @ 2d");
    // A 4-d batch (2, 2) of identities times a.
    std::vector<double> eye;
    for (int n = 0; n < 4; ++n) eye.insert(eye.end(), {1, 0, 0, 1});
    const Tensor id = make(eye, {2, 2, 2, 2}, dt);
    const Tensor a4 = ops::contiguous(ops::expand(a, {2, 2, 2, 3}));
    check_values(ops::matmul(id, a4), {2, 2, 2, 3}, a4.to_vector<double>(), tol(dt), d + " 4d");
    // A product large enough for BLAS and threads: (64, 96) @ (96, 80) against a double loop.
    Generator gen(5);
    const Tensor x = Tensor::empty({64, 96}, dt), y = Tensor::empty({96, 80}, dt);
    ops::uniform_(x, -1, 1, gen);
    ops::uniform_(y, -1, 1, gen);
    const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
    std::vector<double> ref(64 * 80, 0.0);
    for (int i = 0; i < 64; ++i)
      for (int k = 0; k < 96; ++k)
        for (int j = 0; j < 80; ++j) ref[size_t(i * 80 + j)] += xv[size_t(i * 96 + k)] * yv[size_t(k * 80 + j)];
    check_values(ops::matmul(x, y), {64, 80}, ref, dt == DType::f64 ? 1e-12 : 1e-5, d + " large");

    // linear: x (2, 3), weight (2, 3), bias (2,): x W^T + b.
    const Tensor w = make({1, 0, -1, 2, 1, 0}, {2, 3}, dt), bias = make({0.5, -1}, {2}, dt);
    check_values(ops::linear(a, w, bias), {2, 2}, {-1.5, 3, -1.5, 12}, tol(dt), d + " linear");
    check_values(ops::linear(a, w, Tensor()), {2, 2}, {-2, 4, -2, 13}, tol(dt), d + " linear no bias");
    check_values(ops::linear(ops::view(a, {1, 2, 3}), w, bias), {1, 2, 2}, {-1.5, 3, -1.5, 12}, tol(dt),
                 d + " linear 3d");
    check_values(ops::linear(make({1, 2, 3}, {3}, dt), w, bias), {2}, {-1.5, 3}, tol(dt), d + " linear 1d");
  }
}

// ops::add_matmul_ (out += a' b', one accumulating GEMM): in f32 and f64 matmul then add_
// up to the order of the sum (a few ulps of the sum of the magnitudes |out| + |a'| |b'|,
// here with K = 300, more than one block of K); a 16-bit out is the f32 composition rounded
// once, and an f32 out beside bf16 operands the f32 composition itself; K = 0 adds nothing.
BOOST_AUTO_TEST_CASE(add_matmul_adds_the_product_into_out) {
  Generator gen(11);
  const auto random = [&](const Shape& s) {
    Tensor t = Tensor::empty(s, DType::f64);
    ops::uniform_(t, -1, 1, gen);
    return t;
  };
  for (DType dt : kFloat) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool ta = variant & 1, tb = variant & 2;
      BOOST_TEST_CONTEXT(dtype_name(dt) << (ta ? " a^T" : "") << (tb ? " b^T" : "")) {
        const Tensor a = ops::to(random(ta ? Shape{2, 300, 40} : Shape{2, 40, 300}), dt);
        const Tensor b = ops::to(random(tb ? Shape{24, 300} : Shape{300, 24}), dt);
        const Tensor out0 = ops::to(random({2, 40, 24}), dt);
        const Tensor out = ops::clone(out0);
        ops::add_matmul_(out, a, b, ta, tb);
        const Tensor want = ops::add(out0, ops::matmul(a, b, ta, tb));
        // The sum of the magnitudes, from |out0| and |a| |b| on the host.
        const auto host = [](const Tensor& t) { return ops::to(t, DType::f64).to_vector<double>(); };
        const auto magnitudes = [&](const Tensor& t) {
          std::vector<double> v = host(t);
          for (double& x : v) x = std::fabs(x);
          return Tensor::from_vector(v, t.shape());
        };
        const std::vector<double> scale =
            host(ops::add(magnitudes(out0), ops::matmul(magnitudes(a), magnitudes(b), ta, tb)));
        const std::vector<double> got = host(out), expected = host(want);
        const double ulp = dt == DType::f64 ? 0x1p-52 : 0x1p-23;
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += std::fabs(got[i] - expected[i]) > 8 * ulp * scale[i];
        BOOST_TEST(bad == 0u);
      }
    }
  }
  for (DType dt : {DType::bf16, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      const Tensor a = ops::to(random({300, 40}), dt), b = ops::to(random({300, 24}), dt);
      const Tensor out0 = ops::to(random({40, 24}), dt);
      const Tensor out = ops::clone(out0);
      ops::add_matmul_(out, a, b, true, false);
      const Tensor wide = ops::to(out0, DType::f32);
      ops::add_matmul_(wide, ops::to(a, DType::f32), ops::to(b, DType::f32), true, false);
      BOOST_TEST(test::max_abs_diff(out, ops::to(wide, dt)) == 0.0);
      // An f32 out beside the 16-bit operands is never rounded.
      const Tensor out32 = ops::to(out0, DType::f32);
      ops::add_matmul_(out32, a, b, true, false);
      BOOST_TEST(test::max_abs_diff(out32, wide) == 0.0);
    }
  }
  const Tensor out = make({1, 2, 3, 4}, {2, 2}, DType::f32);
  ops::add_matmul_(out, Tensor::zeros({2, 0}), Tensor::zeros({0, 2}));
  check_values(out, {2, 2}, {1, 2, 3, 4}, 0.0, "K = 0");
  const Tensor a = Tensor::zeros({2, 4}), b = Tensor::zeros({4, 2});
  test::check_error([&] { ops::add_matmul_(Tensor::zeros({2, 3}), a, b); }, {"add_matmul_", "(2, 3)", "(2, 2)"});
  const Tensor transposed = ops::transpose(Tensor::zeros({2, 2}), 0, 1);
  test::check_error([&] { ops::add_matmul_(transposed, a, b); }, {"add_matmul_", "contiguous"});
  test::check_error([&] { ops::add_matmul_(Tensor::zeros({2, 2}, DType::f64), a, b); }, {"add_matmul_", "f64", "f32"});
}

BOOST_AUTO_TEST_CASE(softmax_plain_and_causal) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const double third = 1.0 / 3.0;
    check_values(ops::softmax(make({0, std::log(2.0)}, {2}, dt)), {2}, {third, 2 * third}, tol(dt), d + " [0, ln2]");
    check_values(ops::softmax(make({0, 0, 0, 0, 1000, 1000, -1000, 1000}, {2, 4}, dt)), {2, 4},
                 {0.25, 0.25, 0.25, 0.25, third, third, 0, third}, tol(dt), d + " uniform and large");
    check_values(ops::softmax(make({1, 2, 3}, {1, 3}, dt)), {1, 3},
                 {1 / (1 + std::exp(1.0) + std::exp(2.0)), std::exp(1.0) / (1 + std::exp(1.0) + std::exp(2.0)),
                  std::exp(2.0) / (1 + std::exp(1.0) + std::exp(2.0))},
                 tol(dt), d + " [1, 2, 3]");
    // Causal, Tq = Tk = 3 on zeros: row i is uniform over keys 0..i.
    check_values(ops::softmax(Tensor::zeros({3, 3}, dt), true), {3, 3}, {1, 0, 0, 0.5, 0.5, 0, third, third, third},
                 tol(dt), d + " causal square");
    // Tq = 2 < Tk = 3: the queries are the last two of the sequence, so query 0 sees keys 0..1.
    check_values(ops::softmax(Tensor::zeros({2, 3}, dt), true), {2, 3}, {0.5, 0.5, 0, third, third, third}, tol(dt),
                 d + " causal Tq < Tk");
    // Tq = 1: the last query sees every key.
    check_values(ops::softmax(make({0, std::log(2.0), 0}, {1, 3}, dt), true), {1, 3}, {0.25, 0.5, 0.25}, tol(dt),
                 d + " causal Tq = 1");
    // Masked entries are ignored even when huge; the mask repeats over the batch and head dims.
    const double ln3 = std::log(3.0), ln2 = std::log(2.0);
    const Tensor big = make({0, ln3, 1e4, ln3, 0, 0, ln3, 0, -1e4, 0, 0, ln2}, {2, 2, 3}, dt);
    check_values(ops::softmax(big, true), {2, 2, 3}, {0.25, 0.75, 0, 0.6, 0.2, 0.2, 0.75, 0.25, 0, 0.25, 0.25, 0.5},
                 tol(dt), d + " causal batched");
    // softmax_backward: dx = y (g - y.g); y = [1/3, 2/3], g = [1, 0] -> [2/9, -2/9].
    check_values(ops::softmax_backward(make({third, 2 * third}, {2}, dt), make({1, 0}, {2}, dt)), {2},
                 {2.0 / 9.0, -2.0 / 9.0}, tol(dt), d + " softmax_backward");
    // Zero gradient on masked entries.
    const Tensor y = ops::softmax(Tensor::zeros({2, 2}, dt), true);
    check_values(ops::softmax_backward(y, make({1, 5, 1, 3}, {2, 2}, dt)), {2, 2}, {0, 0, -0.5, 0.5}, tol(dt),
                 d + " softmax_backward causal");
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_values) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    // [1, 2, 3]: mean 2, variance 2/3, x_hat = [-sqrt(3/2), 0, sqrt(3/2)].
    const double s = std::sqrt(1.5);
    const Tensor one = Tensor::ones({3}, dt), zero = Tensor::zeros({3}, dt);
    ops::LayerNormOut r = ops::layer_norm(make({1, 2, 3}, {1, 3}, dt), one, zero, 0.0);
    check_values(r.y, {1, 3}, {-s, 0, s}, tol(dt), d + " y");
    check_values(r.mean, {1}, {2}, tol(dt), d + " mean");
    check_values(r.rstd, {1}, {s}, tol(dt), d + " rstd");
    // With eps, weight and bias; a second row [10, 10, 13]: mean 11, var 2, x_hat [-1, -1, 2]/sqrt 2.
    const double eps = 1e-5, rs1 = 1 / std::sqrt(2.0 / 3.0 + eps), rs2 = 1 / std::sqrt(2.0 + eps);
    r = ops::layer_norm(make({1, 2, 3, 10, 10, 13}, {2, 3}, dt), make({1, 2, 3}, {3}, dt),
                        make({0.5, 0.5, -1}, {3}, dt), eps);
    check_values(r.y, {2, 3}, {-rs1 + 0.5, 0.5, 3 * rs1 - 1, -rs2 + 0.5, -2 * rs2 + 0.5, 6 * rs2 - 1}, tol(dt) * 2,
                 d + " y affine");
    check_values(r.mean, {2}, {2, 11}, tol(dt), d + " means");
    check_values(r.rstd, {2}, {rs1, rs2}, tol(dt), d + " rstds");
    // A constant row normalizes to the bias.
    r = ops::layer_norm(make({4, 4, 4}, {3}, dt), make({1, 2, 3}, {3}, dt), make({7, 8, 9}, {3}, dt), eps);
    check_values(r.y, {3}, {7, 8, 9}, tol(dt), d + " constant row");

    // Backward. grad_y = 1, weight = 1: dx = 0 (the mean of x_hat is 0); dbias = rows of g.
    const Tensor x = make({1, 2, 3, 10, 10, 13}, {2, 3}, dt);
    r = ops::layer_norm(x, one, zero, 0.0);
    ops::LayerNormGrads g = ops::layer_norm_backward(Tensor::ones({2, 3}, dt), x, one, r.mean, r.rstd);
    check_values(g.dx, {2, 3}, {0, 0, 0, 0, 0, 0}, tol(dt), d + " dx of sum");
    check_values(g.dbias, {3}, {2, 2, 2}, tol(dt), d + " dbias");
    const double q = 1 / std::sqrt(2.0);
    check_values(g.dweight, {3}, {-s - q, -q, s + 2 * q}, tol(dt) * 2, d + " dweight");
    // grad_y = e_0 on row [1, 2, 3] (weight 1): dx_j = rstd (delta_0j - 1/3 - x_hat_j x_hat_0 / 3).
    r = ops::layer_norm(make({1, 2, 3}, {1, 3}, dt), one, zero, 0.0);
    g = ops::layer_norm_backward(make({1, 0, 0}, {1, 3}, dt), make({1, 2, 3}, {1, 3}, dt), one, r.mean, r.rstd);
    check_values(g.dx, {1, 3}, {s * (1 - 1.0 / 3 - 1.5 / 3), s * (-1.0 / 3), s * (-1.0 / 3 + 1.5 / 3)}, tol(dt) * 2,
                 d + " dx e0");
  }
}

BOOST_AUTO_TEST_CASE(embedding_forward_and_scatter_add) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const Tensor w = make({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}, dt);
    for (DType it : {DType::i64, DType::i32}) {
      const Tensor i = ops::to(idx({3, 0, 3, 1}, {2, 2}), it);
      check_values(ops::embedding(w, i), {2, 2, 2}, {30, 31, 0, 1, 30, 31, 10, 11}, 0,
                   d + " embedding " + dtype_name(it));
      // Repeated indices accumulate: rows 1 (x3) and 3 (x1).
      const Tensor rep = ops::to(idx({1, 1, 3, 1}, {4}), it);
      const Tensor gy = make({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, dt);
      check_values(ops::embedding_backward(gy, rep, 4), {4, 2}, {0, 0, 11, 14, 0, 0, 5, 6}, tol(dt),
                   d + " embedding_backward " + dtype_name(it));
    }
    // Large enough for the threaded path: every column band must see every index.
    const int64_t n = 600, c = 96, v = 9;
    std::vector<int64_t> iv(n);
    for (int64_t k = 0; k < n; ++k) iv[size_t(k)] = (k * 7 + k / 5) % v;
    const Tensor gy = Tensor::empty({n, c}, dt);
    Generator gen(3);
    ops::uniform_(gy, -1, 1, gen);
    const std::vector<double> gv = gy.to_vector<double>();
    std::vector<double> ref(size_t(v * c), 0.0);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < c; ++j) ref[size_t(iv[size_t(k)] * c + j)] += gv[size_t(k * c + j)];
    check_values(ops::embedding_backward(gy, idx(iv, {n}), v), {v, c}, ref, dt == DType::f64 ? 1e-12 : 1e-5,
                 d + " embedding_backward large");
  }
}

BOOST_AUTO_TEST_CASE(cross_entropy_values) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const double ln2 = std::log(2.0), ln3 = std::log(3.0);
    // Rows [0, ln 2] (p = [1/3, 2/3]) and [ln 3, 0, 0] style cases; -100 rows do not count.
    const Tensor logits = make({0, ln2, 0, 0, ln2, 0, 5, 5, 5}, {3, 3}, dt);
    const Tensor targets = idx({1, -100, 0}, {3});
    ops::CrossEntropyOut o = ops::cross_entropy(logits, targets, -100);
    // Row 0: logits [0, ln2, 0], p_1 = 2/4.  Row 2: uniform, p_0 = 1/3.
    check_values(o.loss, {}, {(ln2 + ln3) / 2}, tol(dt), d + " loss");
    BOOST_TEST(o.count.item() == 2);
    check_values(o.lse, {3}, {std::log(4.0), std::log(4.0), 5 + ln3}, tol(dt), d + " lse");
    // Two classes: -log(2/3) and -log(1/3).
    const Tensor two = make({0, ln2, 0, ln2}, {2, 2}, dt);
    check_values(ops::cross_entropy(two, idx({1, 0}, {2}), -100).loss, {}, {(std::log(1.5) + ln3) / 2}, tol(dt),
                 d + " two classes");
    // i32 targets and a custom ignore index (class 0 ignored).
    o = ops::cross_entropy(two, ops::to(idx({1, 0}, {2}), DType::i32), 0);
    BOOST_TEST(o.count.item() == 1);
    check_values(o.loss, {}, {std::log(1.5)}, tol(dt), d + " ignore class 0");
    // Everything ignored: loss 0, counted 0, zero gradient.
    o = ops::cross_entropy(two, idx({-1, -1}, {2}), -1);
    BOOST_TEST(o.count.item() == 0);
    check_values(o.loss, {}, {0}, 0, d + " all ignored");
    check_values(ops::cross_entropy_backward(two, idx({-1, -1}, {2}), o.lse, Tensor::scalar(1.0, dt), o.count, -1),
                 {2, 2}, {0, 0, 0, 0}, 0, d + " all ignored backward");
    // Stable for huge logits.
    check_values(ops::cross_entropy(make({1000, 1000 + ln2}, {1, 2}, dt), idx({1}, {1}), -100).loss, {},
                 {std::log(1.5)}, dt == DType::f64 ? 1e-12 : 1e-4, d + " huge logits");

    // Backward: (softmax - onehot) * grad_loss / counted; ignored rows zero.
    o = ops::cross_entropy(logits, targets, -100);
    const Tensor g = ops::cross_entropy_backward(logits, targets, o.lse, Tensor::scalar(3.0, dt), o.count, -100);
    const double k = 3.0 / 2.0;
    check_values(g, {3, 3}, {0.25 * k, (0.5 - 1) * k, 0.25 * k, 0, 0, 0, (1.0 / 3 - 1) * k, k / 3, k / 3}, tol(dt),
                 d + " backward");

    // A padded vocabulary: the same rows with two padding columns (large values, which must
    // not count) are the same loss, lse and gradient, and the padding's gradient is zero.
    const Tensor padded = make({0, ln2, 0, 50, 50, 0, 0, ln2, 50, 50, 5, 5, 5, 50, 50}, {3, 5}, dt);
    o = ops::cross_entropy(padded, targets, -100, 3);
    check_values(o.loss, {}, {(ln2 + ln3) / 2}, tol(dt), d + " padded loss");
    check_values(o.lse, {3}, {std::log(4.0), std::log(4.0), 5 + ln3}, tol(dt), d + " padded lse");
    check_values(ops::cross_entropy_backward(padded, targets, o.lse, Tensor::scalar(3.0, dt), o.count, -100, 3), {3, 5},
                 {0.25 * k, (0.5 - 1) * k, 0.25 * k, 0, 0, 0, 0, 0, 0, 0, (1.0 / 3 - 1) * k, k / 3, k / 3, 0, 0},
                 tol(dt), d + " padded backward");
  }
}

BOOST_AUTO_TEST_CASE(copies_fills_and_conversions) {
  for (DType dt : kFloat) {
    Tensor t = Tensor::zeros({2, 3}, dt);
    check_values(t, {2, 3}, {0, 0, 0, 0, 0, 0}, 0, "zeros");
    ops::fill_(t, 2.5);
    check_values(t, {2, 3}, {2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, 0, "fill_");
    ops::copy_(t, make({1, 2, 3}, {3}, dt));
    check_values(t, {2, 3}, {1, 2, 3, 1, 2, 3}, 0, "copy_ broadcast");
    ops::copy_(t, make({-1, -2, -3, -4, -5, -6}, {2, 3}, DType::f64));  // converts
    check_values(t, {2, 3}, {-1, -2, -3, -4, -5, -6}, 0, "copy_ convert");
    ops::add_(t, make({1, 1, 1, 1, 1, 1}, {2, 3}, dt), -2.0);
    check_values(t, {2, 3}, {-3, -4, -5, -6, -7, -8}, 0, "add_ alpha");
    ops::mul_(t, -0.5);
    check_values(t, {2, 3}, {1.5, 2, 2.5, 3, 3.5, 4}, 0, "mul_");
    ops::zero_(t);
    check_values(t, {2, 3}, {0, 0, 0, 0, 0, 0}, 0, "zero_");
    check_values(Tensor::full({2}, -7.25, dt), {2}, {-7.25, -7.25}, 0, "full");
    check_values(Tensor::ones({}, dt), {}, {1}, 0, "ones 0-d");
    BOOST_TEST(Tensor::scalar(3.5, dt).item() == 3.5);
    const Tensor c = ops::clone(t);
    BOOST_TEST(c.storage() != t.storage());
  }
}

BOOST_AUTO_TEST_CASE(dropout_masks) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const int64_t n = 100000;
    Generator gen(7);
    const Tensor x = Tensor::empty({n}, dt);
    ops::uniform_(x, 0.5, 1.5, gen);
    // p = 0: the identity, bit for bit.
    BOOST_TEST(test::max_abs_diff(ops::dropout(x, 0.0, 1, 0), x) == 0.0);
    for (double p : {0.1, 0.5, 0.9}) {
      const Tensor y = ops::dropout(x, p, 1234, 77);
      const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
      int64_t kept = 0, bad = 0;
      const double scale = double(dt == DType::f32 ? double(float(1.0 / (1.0 - p))) : 1.0 / (1.0 - p));
      for (int64_t i = 0; i < n; ++i) {
        if (yv[size_t(i)] == 0.0) continue;
        ++kept;
        const double expected = dt == DType::f32 ? double(float(xv[size_t(i)]) * float(scale)) : xv[size_t(i)] * scale;
        bad += yv[size_t(i)] != expected;
      }
      BOOST_TEST(bad == 0, d << " p=" << p << ": " << bad << " kept values not scaled by 1/(1-p)");
      // Binomial: the kept fraction is within 5 standard deviations of 1 - p.
      const double frac = double(kept) / double(n), sd = std::sqrt(p * (1 - p) / double(n));
      BOOST_TEST(std::fabs(frac - (1 - p)) < 5 * sd, d << " p=" << p << ": kept fraction " << frac);
      // The expectation is preserved: mean(y) ~ mean(x).
      BOOST_TEST(std::fabs(ops::mean(y).item() - ops::mean(x).item()) < 0.03 * std::sqrt(p / (1 - p)) + 1e-3);
      // Replay: the same (seed, first) gives the same mask; another first or seed does not.
      BOOST_TEST(test::max_abs_diff(ops::dropout(x, p, 1234, 77), y) == 0.0);
      BOOST_TEST(test::max_abs_diff(ops::dropout(x, p, 1234, 78), y) > 0.0);
      BOOST_TEST(test::max_abs_diff(ops::dropout(x, p, 1235, 77), y) > 0.0);
    }
    // Counter-based: element i of the draw at `first` is element i - 1 of the draw at first + 1.
    const Tensor ones = Tensor::ones({1000}, dt);
    const std::vector<double> m0 = ops::dropout(ones, 0.5, 9, 100).to_vector<double>();
    const std::vector<double> m1 = ops::dropout(ones, 0.5, 9, 101).to_vector<double>();
    bool shifted = true;
    for (size_t i = 1; i < m0.size(); ++i) shifted = shifted && m0[i] == m1[i - 1];
    BOOST_TEST(shifted);
    // A multi-dimensional mask is the flat mask in row-major order.
    const std::vector<double> m2 = ops::dropout(Tensor::ones({10, 100}, dt), 0.5, 9, 100).to_vector<double>();
    BOOST_TEST((m2 == m0));
  }
}

BOOST_AUTO_TEST_CASE(random_fill_moments) {
  for (DType dt : kFloat) {
    const std::string d = dtype_name(dt);
    const int64_t n = 100000;
    Generator gen(2024);
    const Tensor z = Tensor::empty({n}, dt);
    ops::normal_(z, 1.5, 2.0, gen);
    const std::vector<double> zv = z.to_vector<double>();
    double m1 = 0, m2 = 0, m4 = 0, lag = 0;
    for (double v : zv) m1 += v;
    m1 /= double(n);
    for (size_t i = 0; i < zv.size(); ++i) {
      const double c = (zv[i] - m1) / 2.0;
      m2 += c * c;
      m4 += c * c * c * c;
      if (i + 1 < zv.size()) lag += c * (zv[i + 1] - m1) / 2.0;
    }
    m2 /= double(n);
    m4 /= double(n);
    lag /= double(n - 1);
    // Standard errors: mean 2/sqrt(n) = 0.0063, standardized variance sqrt(2/n) = 0.0045,
    // fourth moment sqrt(96/n) = 0.031, lag-1 correlation 1/sqrt(n) = 0.0032.
    BOOST_TEST(std::fabs(m1 - 1.5) < 0.03, d << " normal mean " << m1);
    BOOST_TEST(std::fabs(m2 - 1.0) < 0.025, d << " normal variance " << m2 * 4);
    BOOST_TEST(std::fabs(m4 - 3.0) < 0.16, d << " normal kurtosis " << m4);
    BOOST_TEST(std::fabs(lag) < 0.016, d << " normal lag-1 correlation " << lag);

    const Tensor u = Tensor::empty({n}, dt);
    ops::uniform_(u, -2.0, 3.0, gen);
    const std::vector<double> uv = u.to_vector<double>();
    double s = 0, ss = 0, lo = 1e9, hi = -1e9;
    for (double v : uv) {
      s += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    s /= double(n);
    for (double v : uv) ss += (v - s) * (v - s);
    ss /= double(n);
    BOOST_TEST(lo >= -2.0);
    BOOST_TEST(hi <= 3.0);
    BOOST_TEST(lo < -1.99);
    BOOST_TEST(hi > 2.99);
    BOOST_TEST(std::fabs(s - 0.5) < 0.03, d << " uniform mean " << s);                // se 0.0046
    BOOST_TEST(std::fabs(ss - 25.0 / 12.0) < 0.04, d << " uniform variance " << ss);  // se 0.0059
    // Each decile holds a tenth of the draws (se 0.00095).
    std::vector<int64_t> bins(10, 0);
    for (double v : uv) ++bins[std::min<size_t>(9, size_t((v + 2.0) / 0.5))];
    for (int64_t b : bins) BOOST_TEST(std::fabs(double(b) / double(n) - 0.1) < 0.005);
  }
}

BOOST_AUTO_TEST_CASE(generator_state_replays_draws) {
  Generator gen(11);
  const Tensor a = Tensor::empty({1001}), b = Tensor::empty({1001}), c = Tensor::empty({1001});
  const GeneratorState s0 = gen.state();
  ops::normal_(a, 0, 1, gen);
  BOOST_TEST(gen.state().offset > s0.offset);
  ops::normal_(b, 0, 1, gen);
  BOOST_TEST(test::max_abs_diff(a, b) > 0.0);  // consecutive draws differ
  gen.set_state(s0);
  ops::normal_(c, 0, 1, gen);
  BOOST_TEST(test::max_abs_diff(a, c) == 0.0);
  Generator other(12);
  ops::normal_(c, 0, 1, other);
  BOOST_TEST(test::max_abs_diff(a, c) > 0.0);  // another seed differs
  gen.manual_seed(11);
  ops::uniform_(c, 0, 1, gen);
  BOOST_TEST(gen.state().offset == 1001u);
  // f64 and f32 draws of the same counters agree to float precision.
  gen.set_state(s0);
  const Tensor d = Tensor::empty({1001}, DType::f64);
  ops::normal_(d, 0, 1, gen);
  BOOST_TEST(test::max_abs_diff(a, d) < 1e-6);
}

BOOST_AUTO_TEST_CASE(random_results_do_not_depend_on_thread_count) {
  const int saved = omp_get_max_threads();
  const int64_t n = 200001;  // well above the threading grain, odd (Box-Muller pairs)
  for (DType dt : kFloat) {
    std::vector<Tensor> normal, uniform, drop, embb;
    const Tensor x = Tensor::ones({n}, dt);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Generator gen(99);
      Tensor z = Tensor::empty({n}, dt), u = Tensor::empty({n}, dt);
      ops::normal_(z, 0, 1, gen);
      ops::uniform_(u, 0, 1, gen);
      normal.push_back(z);
      uniform.push_back(u);
      drop.push_back(ops::dropout(x, 0.3, 5, 11));
      std::vector<int64_t> iv(4000);
      for (size_t k = 0; k < iv.size(); ++k) iv[k] = int64_t(k % 13);
      embb.push_back(ops::embedding_backward(ops::view(ops::narrow(u, 0, 0, 4000 * 50), {4000, 50}),
                                             Tensor::from_vector(iv, {4000}), 13));
    }
    omp_set_num_threads(saved);
    for (size_t k = 1; k < normal.size(); ++k) {
      BOOST_TEST(std::memcmp(normal[0].raw_data(), normal[k].raw_data(), normal[0].nbytes()) == 0);
      BOOST_TEST(std::memcmp(uniform[0].raw_data(), uniform[k].raw_data(), uniform[0].nbytes()) == 0);
      BOOST_TEST(std::memcmp(drop[0].raw_data(), drop[k].raw_data(), drop[0].nbytes()) == 0);
      BOOST_TEST(std::memcmp(embb[0].raw_data(), embb[k].raw_data(), embb[0].nbytes()) == 0);
    }
  }
}

// Note [16-bit activations]: every floating op takes bf16/f16 operands as stored, computes in
// f32 and rounds its result once. So its 16-bit result is exactly its f32 result on the same
// (rounded, hence exactly widened) inputs, rounded once to the 16-bit dtype; statistics kept
// in f32 (norms' mean and rstd, cross-entropy's lse and loss, attention's lse) are the f32
// op's bit for bit. An f32 operand beside a 16-bit one is read as is.
BOOST_AUTO_TEST_CASE(sixteen_bit_ops_are_the_f32_ops_rounded_once) {
  for (DType dt : {DType::bf16, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Generator gen(7);
      auto random = [&](const Shape& shape, double scale = 1.0) {
        Tensor t = Tensor::empty(shape);
        ops::uniform_(t, -scale, scale, gen);
        return ops::to(t, dt);
      };
      const auto wide = [](const Tensor& t) { return ops::to(t, DType::f32); };
      // got (16-bit) against want (f32) rounded once: the same bits.
      const auto same = [&](const Tensor& got, const Tensor& want, const std::string& what) {
        BOOST_TEST_REQUIRE((got.dtype() == dt), what << ": " << got.str());
        BOOST_TEST(test::max_abs_diff(wide(got), wide(ops::to(want, dt))) == 0.0, what);
      };
      const Tensor x = random({3, 4, 8}, 2.0), y = random({3, 4, 8}, 2.0), b = random({8});
      const Tensor xw = wide(x), yw = wide(y), bw = wide(b);
      const Tensor f = Tensor::empty({8});
      ops::uniform_(f, -1, 1, gen);

      same(ops::add(x, y), ops::add(xw, yw), "add");
      same(ops::sub(x, b), ops::sub(xw, bw), "sub, broadcast");
      same(ops::mul(x, f), ops::mul(xw, f), "mul by an f32 table");
      same(ops::mul(f, x), ops::mul(f, xw), "f32 table times 16-bit");
      same(ops::div(x, ops::add(ops::mul(y, y), 1.0)), ops::div(xw, wide(ops::add(ops::mul(y, y), 1.0))), "div");
      same(ops::mul(x, 0.3), ops::mul(xw, 0.3), "scale");
      same(ops::tanh(x), ops::tanh(xw), "tanh");
      same(ops::exp(x), ops::exp(xw), "exp");
      same(ops::gelu(x), ops::gelu(xw), "gelu");
      same(ops::silu(x), ops::silu(xw), "silu");
      same(ops::gelu_backward(x, y), ops::gelu_backward(xw, yw), "gelu_backward");
      same(ops::silu_backward(x, y), ops::silu_backward(xw, yw), "silu_backward");
      same(ops::relu_backward(x, y), ops::relu_backward(xw, yw), "relu_backward");
      same(ops::sum(x, 1), ops::sum(xw, 1), "sum over a dimension");
      same(ops::sum_to(x, {8}), ops::sum_to(xw, {8}), "sum_to (a bias gradient)");
      same(ops::max(x, 2), ops::max(xw, 2), "max");
      same(ops::softmax(x, true), ops::softmax(xw, true), "causal softmax");
      {
        const Tensor acc = ops::clone(x);
        ops::add_(acc, y, 0.5);
        Tensor want = ops::clone(xw);
        ops::add_(want, yw, 0.5);
        same(acc, want, "add_ (gradient accumulation)");
      }

      const Tensor w = random({5, 8}), bias = random({5});
      same(ops::matmul(x, w, false, true), ops::matmul(xw, wide(w), false, true), "matmul");
      same(ops::matmul(x, y, true, false), ops::matmul(xw, yw, true, false), "batched matmul, transposed");
      same(ops::linear(x, w, bias), ops::linear(xw, wide(w), wide(bias)), "linear");
      const Tensor fbias = wide(bias);
      same(ops::linear(x, w, fbias), ops::linear(xw, wide(w), fbias), "linear with an f32 bias");

      const Tensor lw = random({8}), lb = random({8});
      const ops::LayerNormOut ln = ops::layer_norm(x, lw, lb, 1e-5),
                              lnw = ops::layer_norm(xw, wide(lw), wide(lb), 1e-5);
      same(ln.y, lnw.y, "layer_norm");
      BOOST_TEST((ln.rstd.dtype() == DType::f32));
      BOOST_TEST(test::max_abs_diff(ln.rstd, lnw.rstd) == 0.0);
      const ops::LayerNormGrads lg = ops::layer_norm_backward(y, x, lw, ln.mean, ln.rstd);
      const ops::LayerNormGrads lgw = ops::layer_norm_backward(yw, xw, wide(lw), lnw.mean, lnw.rstd);
      same(lg.dx, lgw.dx, "layer_norm dx");
      same(lg.dweight, lgw.dweight, "layer_norm dweight");
      same(lg.dbias, lgw.dbias, "layer_norm dbias");

      const ops::RmsNormOut rn = ops::rms_norm(x, lw, 1e-5), rnw = ops::rms_norm(xw, wide(lw), 1e-5);
      same(rn.y, rnw.y, "rms_norm");
      BOOST_TEST(test::max_abs_diff(rn.rstd, rnw.rstd) == 0.0);
      const ops::RmsNormGrads rg = ops::rms_norm_backward(y, x, lw, rn.rstd);
      const ops::RmsNormGrads rgw = ops::rms_norm_backward(yw, xw, wide(lw), rnw.rstd);
      same(rg.dx, rgw.dx, "rms_norm dx");
      same(rg.dweight, rgw.dweight, "rms_norm dweight");

      const Tensor table = random({6, 8}), ids = idx({5, 0, 5, 2}, {2, 2});
      same(ops::embedding(table, ids), ops::embedding(wide(table), ids), "embedding");
      const Tensor ge = random({2, 2, 8});
      same(ops::embedding_backward(ge, ids, 6), ops::embedding_backward(wide(ge), ids, 6), "embedding_backward");

      const Tensor logits = random({6, 7}, 4.0), targets = idx({0, 4, -100, 3, 3, 1}, {6});
      const ops::CrossEntropyOut ce = ops::cross_entropy(logits, targets, -100, 5);
      const ops::CrossEntropyOut cew = ops::cross_entropy(wide(logits), targets, -100, 5);
      BOOST_TEST((ce.loss.dtype() == DType::f32 && ce.lse.dtype() == DType::f32));
      BOOST_TEST(ce.loss.item() == cew.loss.item());
      BOOST_TEST(test::max_abs_diff(ce.lse, cew.lse) == 0.0);
      const Tensor g1 = Tensor::scalar(1.5, DType::f32);
      same(ops::cross_entropy_backward(logits, targets, ce.lse, g1, ce.count, -100, 5),
           ops::cross_entropy_backward(wide(logits), targets, cew.lse, g1, cew.count, -100, 5),
           "cross_entropy_backward");

      const Tensor q = random({1, 2, 5, 4}), k = random({1, 2, 5, 4}), v = random({1, 2, 5, 4});
      const ops::AttentionOut at = ops::causal_attention(q, k, v, 0.5);
      const ops::AttentionOut atw = ops::causal_attention(wide(q), wide(k), wide(v), 0.5);
      same(at.out, atw.out, "attention");
      const Tensor go = random({1, 2, 5, 4});
      const ops::AttentionGrads ag = ops::causal_attention_backward(q, k, v, at.out, at.lse, go, 0.5);
      const ops::AttentionGrads agw =
          ops::causal_attention_backward(wide(q), wide(k), wide(v), wide(at.out), at.lse, wide(go), 0.5);
      same(ag.dq, agw.dq, "attention dq");
      same(ag.dk, agw.dk, "attention dk");
      same(ag.dv, agw.dv, "attention dv");
    }
  }
}

// The fused ops of the transformer block against the unfused ops they replace (Note [16-bit
// activations]): in f32 and f64 the same bits (the rounding points are the same); in bf16
// and f16, where a fusion drops a rounding (GELU of the unrounded pre-activation, SwiGLU's
// silu, the residual gradient added before dx is rounded), the f32 composition rounded
// once, and elsewhere the unfused 16-bit ops' bits. Shapes large enough to take the
// kernels' multi-threaded paths as well as small ones.
BOOST_AUTO_TEST_CASE(fused_block_ops_match_their_compositions) {
  const auto bits_equal = [](const Tensor& got, const Tensor& want, const std::string& what) {
    BOOST_TEST_REQUIRE((got.dtype() == want.dtype() && got.shape() == want.shape()),
                       what << ": " << got.str() << " vs " << want.str());
    BOOST_TEST(test::max_abs_diff(got, want) == 0.0, what);
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const bool half = dt == DType::bf16 || dt == DType::f16;
    const DType wide_dt = half ? DType::f32 : dt;
    for (const Shape& shape : {Shape{2, 3, 8}, Shape{4, 64, 160}}) {
      BOOST_TEST_CONTEXT(dtype_name(dt) << " " << shape_str(shape)) {
        Generator gen(11);
        auto random = [&](const Shape& s, double scale = 1.0) {
          Tensor t = Tensor::empty(s, wide_dt);
          ops::uniform_(t, -scale, scale, gen);
          return ops::to(t, dt);
        };
        const auto wide = [&](const Tensor& t) { return ops::to(t, wide_dt); };
        // A 16-bit result against the f32 composition rounded once; a wide one bit for bit.
        const auto rounded_once = [&](const Tensor& got, const Tensor& want_wide, const std::string& what) {
          bits_equal(got, ops::to(want_wide, dt), what);
        };
        const int64_t c = shape.back(), rows = numel(shape) / c;
        const Tensor x = random(shape, 2.0), r = random(shape, 2.0), g = random(shape), gres = random(shape);

        // linear + GELU, and GELU's backward with the bias gradient.
        const Tensor w = random({c, c}, 0.5), bias = random({c});
        const ops::LinearGeluOut lg = ops::linear_gelu(x, w, bias);
        const Tensor pre = ops::linear(x, w, bias);
        bits_equal(lg.pre, pre, "linear_gelu pre");
        if (half)
          rounded_once(lg.y, ops::gelu(ops::linear(wide(x), wide(w), wide(bias))), "linear_gelu");
        else
          bits_equal(lg.y, ops::gelu(pre), "linear_gelu");
        bits_equal(ops::linear_gelu(x, w, Tensor()).pre, ops::linear(x, w, Tensor()), "linear_gelu without bias");
        const ops::GeluBiasGrads gb = ops::gelu_bias_backward(lg.pre, g, true);
        const Tensor grad_pre = ops::gelu_backward(lg.pre, g);
        bits_equal(gb.grad_pre, grad_pre, "gelu_bias_backward grad_pre");
        bits_equal(gb.grad_bias, ops::sum(ops::reshape(grad_pre, {rows, c}), 0), "gelu_bias_backward grad_bias");
        BOOST_TEST(!ops::gelu_bias_backward(lg.pre, g, false).grad_bias.defined());

        // SwiGLU's product and its backward.
        if (half) {
          const Tensor aw = wide(x), bw = wide(r), gw = wide(g);
          rounded_once(ops::swiglu(x, r), ops::mul(ops::silu(aw), bw), "swiglu");
          const ops::SwigluGrads sg = ops::swiglu_backward(x, r, g);
          rounded_once(sg.da, ops::silu_backward(aw, ops::mul(gw, bw)), "swiglu da");
          rounded_once(sg.db, ops::mul(gw, ops::silu(aw)), "swiglu db");
        } else {
          bits_equal(ops::swiglu(x, r), ops::mul(ops::silu(x), r), "swiglu");
          const ops::SwigluGrads sg = ops::swiglu_backward(x, r, g);
          bits_equal(sg.da, ops::silu_backward(x, ops::mul(g, r)), "swiglu da");
          bits_equal(sg.db, ops::mul(g, ops::silu(x)), "swiglu db");
        }

        // The residual add fused into the norms: the same bits in every dtype.
        const Tensor lw = random({c}), lb = random({c});
        const Tensor h = ops::add(x, r);
        const ops::AddLayerNormOut aln = ops::add_layer_norm(x, r, lw, lb, 1e-5);
        const ops::LayerNormOut ln = ops::layer_norm(h, lw, lb, 1e-5);
        bits_equal(aln.sum, h, "add_layer_norm sum");
        bits_equal(aln.y, ln.y, "add_layer_norm y");
        bits_equal(aln.mean, ln.mean, "add_layer_norm mean");
        bits_equal(aln.rstd, ln.rstd, "add_layer_norm rstd");
        const ops::AddRmsNormOut arn = ops::add_rms_norm(x, r, lw, 1e-5);
        const ops::RmsNormOut rn = ops::rms_norm(h, lw, 1e-5);
        bits_equal(arn.sum, h, "add_rms_norm sum");
        bits_equal(arn.y, rn.y, "add_rms_norm y");
        bits_equal(arn.rstd, rn.rstd, "add_rms_norm rstd");

        // Their backwards add the residual's gradient into dx.
        const ops::LayerNormGrads lgr = ops::layer_norm_backward(g, h, lw, ln.mean, ln.rstd, gres);
        const ops::LayerNormGrads lg0 = ops::layer_norm_backward(g, h, lw, ln.mean, ln.rstd);
        bits_equal(lgr.dweight, lg0.dweight, "layer_norm dweight beside a residual");
        bits_equal(lgr.dbias, lg0.dbias, "layer_norm dbias beside a residual");
        const ops::RmsNormGrads rgr = ops::rms_norm_backward(g, h, lw, rn.rstd, gres);
        const ops::RmsNormGrads rg0 = ops::rms_norm_backward(g, h, lw, rn.rstd);
        bits_equal(rgr.dweight, rg0.dweight, "rms_norm dweight beside a residual");
        if (half) {
          const Tensor lnw = ops::layer_norm_backward(wide(g), wide(h), wide(lw), ln.mean, ln.rstd).dx;
          rounded_once(lgr.dx, ops::add(lnw, wide(gres)), "layer_norm dx + residual");
          const Tensor rnw = ops::rms_norm_backward(wide(g), wide(h), wide(lw), rn.rstd).dx;
          rounded_once(rgr.dx, ops::add(rnw, wide(gres)), "rms_norm dx + residual");
        } else {
          bits_equal(lgr.dx, ops::add(lg0.dx, gres), "layer_norm dx + residual");
          bits_equal(rgr.dx, ops::add(rg0.dx, gres), "rms_norm dx + residual");
        }
      }
    }
  }
  // Arguments that do not fit name the op and what was expected.
  const Tensor x = Tensor::zeros({2, 4}), w = Tensor::zeros({4}), b = Tensor::zeros({4});
  test::check_error([&] { ops::add_layer_norm(x, Tensor::zeros({2, 3}), w, b, 1e-5); }, {"add_layer_norm", "(2, 3)"});
  test::check_error([&] { ops::add_rms_norm(x, ops::to(x, DType::f64), w, 1e-5); }, {"add_rms_norm", "r"});
  test::check_error([&] { ops::add_rms_norm(x, x, w, 0.0); }, {"add_rms_norm", "eps"});
  test::check_error([&] { ops::linear_gelu(x, Tensor::zeros({5, 3}), Tensor()); }, {"linear_gelu", "weight"});
  test::check_error([&] { ops::swiglu(x, Tensor::zeros({4, 2})); }, {"swiglu", "differ"});
  test::check_error([&] { ops::gelu_bias_backward(x, Tensor::zeros({2, 5}), true); }, {"gelu_bias_backward"});
  const Tensor stats = Tensor::ones({2});
  test::check_error(
      [&] {
        ops::layer_norm_backward(x, x, w, stats, stats, Tensor::zeros({4, 2}));
      },
      {"layer_norm_backward", "grad_residual"});
}

namespace {

// rotate_half(t) = cat(-t[..., h:], t[..., :h]), h = D/2: the definition the fused rotary
// embedding replaces.
Tensor rotary_rotate_half(const Tensor& t) {
  const int64_t h = t.size(-1) / 2;
  const int last = int(t.dim()) - 1;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  ops::copy_(ops::narrow(out, last, 0, h), ops::neg(ops::narrow(t, last, h, h)));
  ops::copy_(ops::narrow(out, last, h, h), ops::narrow(t, last, 0, h));
  return out;
}

// A rotary case: x's shape, how x is laid out (a transpose of a contiguous tensor of
// `stored` shape when given) and whether the tables are per row.
struct RotaryCase {
  Shape shape, stored;
  int transpose0 = 0, transpose1 = 0;
  bool per_row = false;
};

}  // namespace

// ops::rotary and ops::rotary_backward against their formulas computed in f64 from the same
// stored values, y = a + b with a = x cos, b = rotate_half(x) sin (backward: a = g cos,
// b = -rotate_half(g sin)): f32 and f64 results within one rounding of each term (one fused
// multiply-add of a rounded product, and the f64 formula's own), |y - (a + b)| <= 5u (|a| +
// |b|); a bf16/f16 result the f32 op's on the widened operands rounded once, bit for bit,
// so within one 16-bit rounding of the formula. Random tables (not rotations), so a cos or
// sin read from the wrong half shows; x of 2 to 5 dimensions, views with strides (a
// projection's heads, whose y is stored by position; features strided too), per-row
// tables, and a shape that takes the multi-threaded path.
BOOST_AUTO_TEST_CASE(rotary_matches_its_formula_in_f64) {
  const std::vector<RotaryCase> cases = {
      {{6, 8}, {}},
      {{3, 6, 8}, {}},
      {{2, 3, 5, 8}, {}, 0, 0, true},
      {{2, 3, 5, 8}, {2, 5, 3, 8}, 1, 2},
      {{2, 3, 5, 8}, {2, 3, 8, 5}, 2, 3, true},
      {{2, 2, 3, 4, 6}, {}},
      {{4, 8, 64, 32}, {4, 64, 8, 32}, 1, 2, true},
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (const RotaryCase& rc : cases)
      for (bool backward : {false, true}) {
        BOOST_TEST_CONTEXT(dtype_name(dt) << " x " << shape_str(rc.shape) << (rc.stored.empty() ? "" : " strided")
                                          << (rc.per_row ? " per-row tables" : "")
                                          << (backward ? " backward" : "")) {
          const bool half = dt == DType::bf16 || dt == DType::f16;
          const DType table_dt = dt == DType::f64 ? DType::f64 : DType::f32;
          Generator gen(31);
          const auto random = [&](const Shape& s, DType t) {
            Tensor r = Tensor::empty(s, DType::f64);
            ops::uniform_(r, -2.0, 2.0, gen);
            return ops::to(r, t);
          };
          const Tensor x = rc.stored.empty() ? random(rc.shape, dt)
                                             : ops::transpose(random(rc.stored, dt), rc.transpose0, rc.transpose1);
          BOOST_TEST_REQUIRE((x.shape() == rc.shape && x.is_contiguous() == rc.stored.empty()));
          const int64_t T = rc.shape[rc.shape.size() - 2], D = rc.shape.back();
          const Shape table = rc.per_row ? Shape{rc.shape[0], 1, T, D} : Shape{T, D};
          const Tensor cos = random(table, table_dt), sin = random(table, table_dt);
          const Tensor y = backward ? ops::rotary_backward(x, cos, sin) : ops::rotary(x, cos, sin);
          // A projection's heads (x (B, n, T, D) a view of (B, T, n, D)) give y stored the
          // same way; anything else a contiguous y.
          const bool heads = rc.transpose0 == 1 && rc.transpose1 == 2;
          BOOST_TEST_REQUIRE((y.shape() == x.shape() && y.dtype() == dt &&
                              (heads ? ops::transpose(y, 1, 2).is_contiguous() : y.is_contiguous())),
                             y.str());

          const Tensor x64 = ops::to(x, DType::f64);
          const Tensor c64 = ops::expand(ops::to(cos, DType::f64), x.shape());
          const Tensor s64 = ops::expand(ops::to(sin, DType::f64), x.shape());
          const Tensor a = ops::mul(x64, c64);
          const Tensor b = backward ? ops::neg(rotary_rotate_half(ops::mul(x64, s64)))
                                    : ops::mul(rotary_rotate_half(x64), s64);
          const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(),
                                    got = y.to_vector<double>();
          const double u = dt == DType::f64 ? 0x1p-53 : 0x1p-24;
          const double u16 = dt == DType::bf16 ? 0x1p-8 : 0x1p-11;
          const double tiny = dt == DType::f16 ? 0x1p-25 : 0.0;  // half f16's smallest subnormal
          double worst = 0.0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double want = va[i] + vb[i], m = std::fabs(va[i]) + std::fabs(vb[i]);
            const double bound = half ? u16 * std::fabs(want) + 3 * u * m + tiny : 5 * u * m;
            worst = std::max(worst, std::fabs(got[i] - want) / std::max(bound, 1e-300));
          }
          BOOST_TEST(worst <= 1.0, "the largest error is " << worst << " of its bound");
          if (half) {
            const Tensor wide = ops::to(x, DType::f32);
            const Tensor f32 = backward ? ops::rotary_backward(wide, cos, sin) : ops::rotary(wide, cos, sin);
            BOOST_TEST(test::max_abs_diff(y, ops::to(f32, dt)) == 0.0, "the f32 result rounded once");
          }
        }
      }
  // Shapes and dtypes that do not fit name the op and what was expected.
  const Tensor x = Tensor::zeros({2, 3, 5, 8}), c = Tensor::zeros({5, 8});
  test::check_error([&] { ops::rotary(Tensor::zeros({5, 7}), Tensor::zeros({5, 7}), Tensor::zeros({5, 7})); },
                    {"rotary", "D even", "(5, 7)"});
  test::check_error([&] { ops::rotary(Tensor::zeros({8}), c, c); }, {"rotary", "(..., T, D)"});
  test::check_error([&] { ops::rotary(x, Tensor::zeros({4, 8}), Tensor::zeros({4, 8})); },
                    {"rotary", "(4, 8)", "(2, 3, 5, 8)", "(B, 1, T, D)"});
  test::check_error([&] { ops::rotary(x, c, Tensor::zeros({5, 6})); }, {"rotary", "(5, 6)"});
  const Tensor per_row = Tensor::zeros({3, 1, 5, 8});
  test::check_error([&] { ops::rotary(Tensor::zeros({3, 5, 8}), per_row, per_row); }, {"rotary", "(3, 1, 5, 8)"});
  test::check_error([&] { ops::rotary(x, ops::to(c, DType::f64), c); }, {"rotary", "cos", "f64"});
  test::check_error([&] { ops::rotary_backward(x, c, ops::to(c, DType::bf16)); }, {"rotary_backward", "sin"});
  test::check_error([&] { ops::rotary(ops::to(x, DType::i64), c, c); }, {"rotary", "floating"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_ops
