// Central finite differences in f64: f(inputs) is reduced to a scalar
// with a fixed random weighting, L = sum(f * w), and d L / d input from backward() is
// compared with (L(x + eps) - L(x - eps)) / 2 eps, as the error relative to the larger of
// the two gradients' largest entries.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"

namespace triad::test {

inline Tensor randn64(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  ops::normal_(t, 0.0, scale, gen);
  return t;
}

inline Tensor grad_leaf(const Tensor& t) {
  Tensor c = ops::clone(ops::to(t, DType::f64));
  set_requires_grad(c);
  return c;
}

inline void gradcheck(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                      const std::vector<Tensor>& inputs, double tolerance = 1e-7, double eps = 1e-6) {
  BOOST_TEST_CONTEXT(name) {
    for (const Tensor& t : inputs)
      if (requires_grad(t)) set_grad(t, Tensor());
    const Tensor out = f(inputs);
    const Tensor w = randn64(out.shape(), 4242);
    backward(sum(mul(out, w)));
    NoGradGuard no_grad;
    auto loss = [&] { return ops::sum(ops::mul(f(inputs), w)).item(); };
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      if (!requires_grad(x)) continue;
      BOOST_REQUIRE_MESSAGE(grad(x).defined(), "input " << i << " received no gradient");
      const std::vector<double> analytic = grad(x).to_vector<double>();
      double* p = x.data<double>();
      double max_diff = 0, max_num = 0, max_ana = 0;
      for (int64_t j = 0; j < x.numel(); ++j) {
        const double orig = p[j];
        p[j] = orig + eps;
        const double lp = loss();
        p[j] = orig - eps;
        const double lm = loss();
        p[j] = orig;
        const double num = (lp - lm) / (2 * eps);
        max_diff = std::max(max_diff, std::fabs(num - analytic[size_t(j)]));
        max_num = std::max(max_num, std::fabs(num));
        max_ana = std::max(max_ana, std::fabs(analytic[size_t(j)]));
      }
      BOOST_TEST(max_num > 1e-8, "input " << i << " has a zero numerical gradient (the check cannot fail)");
      const double err = max_diff / std::max({max_num, max_ana, 1e-12});
      BOOST_TEST(err <= tolerance, "input " << i << ": relative error " << err);
    }
  }
}

}  // namespace triad::test
