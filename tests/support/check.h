// Comparison helpers shared by the tests.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace triad::test {

// max |a - b| / max(max |b|, tiny): the error relative to the reference's scale.
inline double relative_error(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE_MESSAGE(a.shape() == b.shape(),
                        "shapes differ: " << shape_str(a.shape()) << " vs " << shape_str(b.shape()));
  const Tensor a64 = ops::to(a, DType::f64), b64 = ops::to(b, DType::f64);
  const double scale = std::max(ops::max_abs(b64), 1e-30);
  return ops::max_abs(ops::sub(a64, b64)) / scale;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE_MESSAGE(a.shape() == b.shape(),
                        "shapes differ: " << shape_str(a.shape()) << " vs " << shape_str(b.shape()));
  return ops::max_abs(ops::sub(ops::to(a, DType::f64), ops::to(b, DType::f64)));
}

// Runs f and checks it throws triad::Error whose message contains every one of `parts`.
template <class F>
void check_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    BOOST_ERROR("expected triad::Error containing '" << parts.front() << "'");
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      BOOST_CHECK_MESSAGE(msg.find(p) != std::string::npos, "'" << msg << "' lacks '" << p << "'");
  }
}

// The message of the triad::Error that f throws ("(no error)" when it throws none).
template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::string data_path(const std::string& file) { return std::string(TRIAD_TEST_DATA_DIR) + "/" + file; }

}  // namespace triad::test
