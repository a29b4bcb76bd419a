// Comparison helpers shared by the tests.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tensor/random.h"

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

// sum (got - want)^2 / sum want^2 in f64: the normalized MSE by which the GPU tests compare
// kernels with the CPU's results.
inline double normalized_mse(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = ops::to(got, DType::f64).to_vector<double>();
  const std::vector<double> w = ops::to(want, DType::f64).to_vector<double>();
  double err = 0, ref = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err += (g[i] - w[i]) * (g[i] - w[i]);
    ref += w[i] * w[i];
  }
  return err / std::max(ref, 1e-300);
}

// Uniform values in [-1, 1) drawn in f64 from `seed`, rounded to dtype.
inline Tensor uniform_values(const Shape& shape, uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator g(seed);
  ops::uniform_(t, -1.0, 1.0, g);
  return ops::to(t, dtype);
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
