// Next-token log-probs and entropy (rlhf/log_probs.h) against log-softmax computed here on
// the host, for every chunking of the rows, with a padded vocabulary and a mask.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/meta.h"
#include "rlhf/log_probs.h"
#include "support/check.h"
#include "tensor/allocator.h"

BOOST_AUTO_TEST_SUITE(test_log_probs)

using namespace triad;
using namespace triad::rlhf;

namespace {

constexpr int64_t B = 2, T = 4, W = 6, V = 5;

Tensor make_logits(DType dtype) {
  Tensor t = Tensor::empty({B, T, W}, DType::f64);
  Generator gen(21);
  ops::normal_(t, 0.0, 2.0, gen);
  return ops::to(t, dtype);
}

// Element by element within an absolute tolerance.
void check_close(const std::vector<double>& a, const std::vector<double>& b, double tolerance) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::fabs(a[i] - b[i]) <= tolerance, "element " << i << ": " << a[i] << " vs " << b[i]);
}

}  // namespace

BOOST_AUTO_TEST_CASE(log_probs_and_entropy_match_log_softmax_for_every_chunking) {
  const Tensor logits = make_logits(DType::f64);
  const Tensor token_ids = Tensor::from_vector(std::vector<int64_t>{1, 4, 0, 2, /**/ 3, 3, 1, 0}, {B, T});
  const Tensor mask = Tensor::from_vector(std::vector<double>{1, 1, 1, /**/ 0, 1, 1}, {B, T - 1});
  const std::vector<double> x = logits.to_vector<double>(), m = mask.to_vector<double>();
  const std::vector<int64_t> id = token_ids.to_vector<int64_t>();
  std::vector<double> logp, entropy;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T - 1; ++t) {
      const double* row = &x[size_t((b * T + t) * W)];
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(row[v]);  // columns V.. are padding
      double h = 0;
      for (int64_t v = 0; v < V; ++v) h -= std::exp(row[v]) / z * (row[v] - std::log(z));
      const double w = m[size_t(b * (T - 1) + t)];
      logp.push_back(w * (row[id[size_t(b * T + t + 1)]] - std::log(z)));
      entropy.push_back(w * h);
    }
  for (const int64_t chunk : {int64_t(1), W, 2 * W, 5 * W, int64_t(1) << 22}) {
    BOOST_TEST_CONTEXT("chunk_elements " << chunk) {
      const TokenLogProbs r = next_token_log_probs(logits, token_ids, mask, V, chunk);
      BOOST_TEST((r.logp.shape() == Shape{B, T - 1}));
      check_close(r.logp.to_vector<double>(), logp, 1e-13);
      check_close(r.entropy.to_vector<double>(), entropy, 1e-13);
    }
  }
  // Without a mask every position counts; i32 ids read the same.
  const TokenLogProbs all = next_token_log_probs(logits, ops::to(token_ids, DType::i32), Tensor(), V);
  BOOST_TEST(all.logp.at({1, 0}) != 0.0);
  BOOST_TEST(all.logp.at({0, 2}) == logp[2], boost::test_tools::tolerance(1e-13));
}

// The gradient of sum(logp) is onehot(target) - softmax on every counted row, 0 elsewhere
// (the last position, masked rows and padding columns); f32 logits give f32 results.
BOOST_AUTO_TEST_CASE(log_prob_gradient_is_onehot_minus_softmax) {
  Tensor logits = make_logits(DType::f32);
  set_requires_grad(logits);
  const Tensor token_ids = Tensor::from_vector(std::vector<int64_t>{1, 4, 0, 2, /**/ 3, 3, 1, 0}, {B, T});
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 0, 1, /**/ 1, 1, 1}, {B, T - 1});
  const TokenLogProbs r = next_token_log_probs(logits, token_ids, mask, V, 2 * W);
  BOOST_TEST((r.logp.dtype() == DType::f32));
  backward(sum(r.logp));
  const std::vector<float> x = logits.to_vector<float>(), g = grad(logits).to_vector<float>();
  const std::vector<int64_t> id = token_ids.to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const bool counted = t < T - 1 && mask.at({b, t}) == 1.0;
      const float* row = &x[size_t((b * T + t) * W)];
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]));
      for (int64_t v = 0; v < W; ++v) {
        double e = 0;
        if (counted && v < V) e = (v == id[size_t(b * T + t + 1)]) - std::exp(double(row[v])) / z;
        BOOST_TEST(g[size_t((b * T + t) * W + v)] == e, boost::test_tools::tolerance(1e-6));
      }
    }
}

// Note [Next-token log-probs]: the forward keeps no (B, T, V) tensor and the backward makes
// one, the gradient; the chunks' temporaries (here 2 rows of V) are all else that lives.
BOOST_AUTO_TEST_CASE(log_probs_materialise_at_most_one_logits_sized_tensor) {
  const int64_t b = 2, t = 64, v = 4096;
  Tensor logits = Tensor::empty({b, t, v});
  Generator gen(3);
  ops::normal_(logits, 0.0, 1.0, gen);
  set_requires_grad(logits);
  std::vector<int64_t> id(size_t(b * t));
  for (size_t i = 0; i < id.size(); ++i) id[i] = int64_t(i * 37 % v);
  const Tensor token_ids = Tensor::from_vector(id, {b, t});
  const double logits_bytes = double(logits.nbytes());
  Allocator& cpu = cpu_allocator();
  const double base = double(cpu.bytes_in_use());
  cpu.reset_peak();
  const TokenLogProbs r = next_token_log_probs(logits, token_ids, Tensor(), -1, 2 * v);
  const double forward_peak = double(cpu.peak_bytes()) - base;
  BOOST_TEST(forward_peak < 0.2 * logits_bytes, "forward peak " << forward_peak << " bytes");
  cpu.reset_peak();
  const double before_backward = double(cpu.bytes_in_use());
  backward(add(sum(r.logp), sum(r.entropy)));
  const double backward_peak = double(cpu.peak_bytes()) - before_backward;
  BOOST_TEST(backward_peak < 1.2 * logits_bytes, "backward peak " << backward_peak << " bytes");
  BOOST_TEST(backward_peak >= logits_bytes);  // the gradient itself
}

BOOST_AUTO_TEST_CASE(log_probs_reject_bad_input) {
  const Tensor logits = make_logits(DType::f64);
  const Tensor token_ids = Tensor::from_vector(std::vector<int64_t>{1, 4, 0, 2, /**/ 3, 3, 1, 5}, {B, T});
  test::check_error([&] { next_token_log_probs(logits, token_ids, Tensor(), V); },
                    {"id 5 at (1, 3) is outside [0, 5)"});
  test::check_error([&] { next_token_log_probs(logits, ops::narrow(token_ids, 1, 0, 3)); }, {"(2, 4, 6)", "(2, 3)"});
  test::check_error(
      [&] {
        next_token_log_probs(logits, token_ids, Tensor::ones({B, T}, DType::f64));
      },
      {"mask must have the shape (2, 3)"});
  test::check_error([&] { next_token_log_probs(logits, token_ids, Tensor(), 7); }, {"classes 7 outside [1, 6]"});
}

BOOST_AUTO_TEST_CASE(sequence_log_probs_sum_the_masked_tokens) {
  const Tensor lp = Tensor::from_vector(std::vector<double>{-1, -2, -3, -0.5, -0.25, -4}, {2, 3});
  const Tensor mask = Tensor::from_vector(std::vector<double>{0, 1, 1, 1, 1, 0}, {2, 3});
  BOOST_TEST(sequence_log_probs(lp, mask).to_vector<double>() == std::vector<double>({-5, -0.75}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()  // test_log_probs
