// The vectorizable exp and tanh of the CPU kernels against the C library.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "tensor/cpu/vec_math.h"

BOOST_AUTO_TEST_SUITE(test_vec_math)

using triad::cpu::vexp;
using triad::cpu::vtanh;

BOOST_AUTO_TEST_CASE(exp_is_within_a_few_ulp_over_its_range) {
  double worst = 0;
  for (float x = -87.0f; x < 88.3f; x += 0.000731f) {
    const double ref = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(vexp(x)) - ref) / ref);
  }
  BOOST_TEST(worst < 3e-7);  // 2.5 ulp of float
  BOOST_TEST(vexp(0.0f) == 1.0f);
  BOOST_TEST(vexp(-1000.0f) < 1e-37f);  // clamped, tiny, not NaN
  BOOST_TEST(std::isfinite(vexp(1000.0f)));
}

BOOST_AUTO_TEST_CASE(tanh_is_within_2e7_absolute) {
  double worst = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.000377f)
    worst = std::max(worst, std::fabs(double(vtanh(x)) - std::tanh(double(x))));
  BOOST_TEST(worst < 2e-7);
  BOOST_TEST(vtanh(0.0f) == 0.0f);
  BOOST_TEST(vtanh(30.0f) == 1.0f);
  BOOST_TEST(vtanh(-30.0f) == -1.0f);
}

BOOST_AUTO_TEST_SUITE_END()  // test_vec_math
