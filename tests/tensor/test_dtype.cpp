// Element types and devices: f16 and bf16 conversions (exhaustive over the 16-bit patterns
// and against a double-precision model of round-to-nearest-even), dtype conversion between
// every pair of dtypes, dtype names and device strings.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "support/check.h"
#include "tensor/ops.h"

namespace triad {
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
}  // namespace triad

BOOST_AUTO_TEST_SUITE(test_dtype)

using namespace triad;

namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// The value of an f16 bit pattern from the IEEE definition, in double.
double f16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0x1f)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(double(mant), -24);
  else
    v = std::ldexp(1.0 + double(mant) / 1024.0, exp - 15);
  return sign ? -v : v;
}

// Round-to-nearest-even to f16 modelled in double (exact: a float has 24 significant bits,
// so |f| / quantum is exact and nearbyint rounds it half to even). Returns the value.
double f16_round_model(float f) {
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return std::copysign(std::numeric_limits<double>::infinity(), double(f));
  int e = a == 0.0 ? -14 : std::ilogb(a);
  if (e < -14) e = -14;
  const double quantum = std::ldexp(1.0, e - 10);
  const double r = std::nearbyint(a / quantum) * quantum;
  return std::copysign(r, double(f));
}

}  // namespace

BOOST_AUTO_TEST_CASE(f16_decodes_every_bit_pattern_by_the_ieee_definition) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16::to_float(uint16_t(h));
    const double expected = f16_value(uint16_t(h));
    if (f16_is_nan(uint16_t(h))) {
      BOOST_TEST_REQUIRE(std::isnan(f), "pattern " << h);
    } else {
      BOOST_TEST_REQUIRE(double(f) == expected, "pattern " << h << ": " << f << " vs " << expected);
      BOOST_TEST_REQUIRE(std::signbit(f) == bool(h & 0x8000u), "pattern " << h);
    }
  }
}

BOOST_AUTO_TEST_CASE(f16_round_trips_every_bit_pattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16::to_float(uint16_t(h));
    const uint16_t back = f16::from_float(f);
    if (f16_is_nan(uint16_t(h)))
      BOOST_TEST_REQUIRE(f16_is_nan(back), "pattern " << h << " -> " << back);
    else
      BOOST_TEST_REQUIRE(back == h, "pattern " << h << " -> " << back);
    // The struct wrapper agrees with the static functions.
    if (!f16_is_nan(uint16_t(h))) BOOST_TEST_REQUIRE(float(f16(f)) == f);
  }
}

BOOST_AUTO_TEST_CASE(f16_known_values) {
  BOOST_TEST(f16::from_float(1.0f) == 0x3c00);
  BOOST_TEST(f16::from_float(-2.0f) == 0xc000);
  BOOST_TEST(f16::from_float(0.5f) == 0x3800);
  BOOST_TEST(f16::from_float(0.0f) == 0x0000);
  BOOST_TEST(f16::from_float(-0.0f) == 0x8000);
  BOOST_TEST(f16::from_float(65504.0f) == 0x7bff);  // largest finite
  BOOST_TEST(f16::to_float(0x7bff) == 65504.0f);
  BOOST_TEST(f16::from_float(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  BOOST_TEST(f16::from_float(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  BOOST_TEST(f16::to_float(0x0001) == std::ldexp(1.0f, -24));
  BOOST_TEST(f16::to_float(0x03ff) == std::ldexp(1023.0f, -24));  // largest subnormal
  BOOST_TEST(f16::to_float(0x3555) == 0.333251953125f);

  // Round to nearest, ties to even (1 + 2^-11 is halfway between 0x3c00 and 0x3c01).
  BOOST_TEST(f16::from_float(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  BOOST_TEST(f16::from_float(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  BOOST_TEST(f16::from_float(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  BOOST_TEST(f16::from_float(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)) == 0x3c00);
  BOOST_TEST(f16::from_float(-(1.0f + 3 * std::ldexp(1.0f, -11))) == 0xbc02);
  // Ties in the subnormal range and across the subnormal/normal boundary.
  BOOST_TEST(f16::from_float(std::ldexp(1.0f, -25)) == 0x0000);  // half the smallest: to even (0)
  BOOST_TEST(f16::from_float(std::ldexp(1.0f, -25) * 1.0001f) == 0x0001);
  BOOST_TEST(f16::from_float(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 quanta: to even (2)
  BOOST_TEST(f16::from_float(std::ldexp(5.0f, -25)) == 0x0002);     // 2.5 quanta: to even (2)
  BOOST_TEST(f16::from_float(std::ldexp(2047.0f, -25)) == 0x0400);  // 1023.5 quanta: up to normal
  BOOST_TEST(f16::from_float(std::ldexp(1.0f, -30)) == 0x0000);
  BOOST_TEST(f16::from_float(-std::ldexp(1.0f, -30)) == 0x8000);

  // Overflow: 65520 is halfway between 65504 (odd mantissa) and 65536, so it rounds to inf.
  BOOST_TEST(f16::from_float(65519.996f) == 0x7bff);
  BOOST_TEST(f16::from_float(65520.0f) == 0x7c00);
  BOOST_TEST(f16::from_float(1e6f) == 0x7c00);
  BOOST_TEST(f16::from_float(-1e6f) == 0xfc00);
  BOOST_TEST(f16::from_float(std::numeric_limits<float>::infinity()) == 0x7c00);
  BOOST_TEST(f16::from_float(-std::numeric_limits<float>::infinity()) == 0xfc00);
  BOOST_TEST(std::isinf(f16::to_float(0x7c00)));

  // NaN stays NaN, including NaNs whose payload lives only in the low float bits.
  BOOST_TEST(f16_is_nan(f16::from_float(std::numeric_limits<float>::quiet_NaN())));
  BOOST_TEST(f16_is_nan(f16::from_float(bits_float(0x7f800001u))));
  BOOST_TEST(f16_is_nan(f16::from_float(bits_float(0xff800001u))));
}

BOOST_AUTO_TEST_CASE(f16_from_float_matches_a_round_to_nearest_even_model) {
  // Every float the conversion can meet, sampled with a stride co-prime to the bit layout,
  // plus every float in the subnormal/normal and overflow neighbourhoods.
  std::unordered_map<uint32_t, uint16_t> encode;  // float bits of an f16 value -> f16 bits
  for (uint32_t h = 0; h < 65536; ++h)
    if (!f16_is_nan(uint16_t(h))) encode[float_bits(f16::to_float(uint16_t(h)))] = uint16_t(h);
  int failures = 0;
  auto check = [&](uint32_t u) {
    const float f = bits_float(u);
    if (std::isnan(f)) return;
    const float expected = float(f16_round_model(f));
    const auto it = encode.find(float_bits(expected));
    const uint16_t got = f16::from_float(f);
    if (it != encode.end() && got == it->second) return;
    if (++failures <= 10)
      BOOST_ERROR("float bits 0x" << std::hex << u << ": got 0x" << got << ", expected 0x"
                                  << (it == encode.end() ? 0xffffu : it->second));
  };
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 257) check(uint32_t(u));
  for (uint32_t base : {0x33000000u, 0x38800000u, 0x477fe000u, 0x3f800000u})
    for (uint32_t d = 0; d < 0x4000u; ++d) {
      check(base - 0x2000u + d);
      check((base - 0x2000u + d) | 0x80000000u);
    }
  BOOST_TEST(failures == 0);
}

BOOST_AUTO_TEST_CASE(bf16_known_values_and_rounding) {
  BOOST_TEST(bf16::from_float(1.0f) == 0x3f80);
  BOOST_TEST(bf16::from_float(-2.0f) == 0xc000);
  BOOST_TEST(bf16::from_float(0.0f) == 0x0000);
  BOOST_TEST(bf16::from_float(-0.0f) == 0x8000);
  BOOST_TEST(bf16::from_float(3.140625f) == 0x4049);  // exactly representable
  BOOST_TEST(float(bf16(3.140625f)) == 3.140625f);
  // 1 + 2^-8 is halfway between 1 (0x3f80) and 1 + 2^-7 (0x3f81): ties to even.
  BOOST_TEST(bf16::from_float(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  BOOST_TEST(bf16::from_float(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  BOOST_TEST(bf16::from_float(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  BOOST_TEST(bf16::from_float(-(1.0f + 3 * std::ldexp(1.0f, -8))) == 0xbf82);
  // Infinity, and overflow of the largest floats to infinity.
  BOOST_TEST(bf16::from_float(std::numeric_limits<float>::infinity()) == 0x7f80);
  BOOST_TEST(bf16::from_float(-std::numeric_limits<float>::infinity()) == 0xff80);
  BOOST_TEST(bf16::from_float(std::numeric_limits<float>::max()) == 0x7f80);
  BOOST_TEST(bf16::from_float(bits_float(0x7f7f0000u)) == 0x7f7f);  // largest finite bf16
  // NaN stays NaN, even when its payload is only in the dropped low bits.
  BOOST_TEST(bf16_is_nan(bf16::from_float(std::numeric_limits<float>::quiet_NaN())));
  BOOST_TEST(bf16_is_nan(bf16::from_float(bits_float(0x7f800001u))));
  BOOST_TEST(bf16_is_nan(bf16::from_float(bits_float(0xffffffffu))));
  BOOST_TEST(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
}

BOOST_AUTO_TEST_CASE(bf16_round_trips_every_bit_pattern_and_matches_rounding_model) {
  for (uint32_t h = 0; h < 65536; ++h) {
    bf16 b;
    b.bits = uint16_t(h);
    const float f = float(b);
    BOOST_TEST_REQUIRE(float_bits(f) == (h << 16));
    const uint16_t back = bf16::from_float(f);
    if (bf16_is_nan(uint16_t(h)))
      BOOST_TEST_REQUIRE(bf16_is_nan(back), "pattern " << h);
    else
      BOOST_TEST_REQUIRE(back == h, "pattern " << h << " -> " << back);
  }
  // Rounding model: the nearer of the two neighbours, the even one on a tie.
  int failures = 0;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 263) {
    const float f = bits_float(uint32_t(u));
    if (std::isnan(f)) continue;
    const uint32_t lo = uint32_t(u) & 0xffff0000u, hi = lo + 0x10000u;
    const uint32_t rest = uint32_t(u) & 0xffffu;
    uint32_t expected = rest < 0x8000u ? lo : rest > 0x8000u ? hi : ((lo >> 16) & 1u ? hi : lo);
    if (bf16::from_float(f) != uint16_t(expected >> 16) && ++failures <= 10) BOOST_ERROR("float bits " << u);
  }
  BOOST_TEST(failures == 0);
}

BOOST_AUTO_TEST_CASE(to_converts_between_every_pair_of_dtypes) {
  const std::vector<DType> all = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i8};
  // Integers every dtype holds exactly (bf16 has 8 significant bits, i8 is [-128, 127]).
  const std::vector<double> ints = {0, 1, -2, 3, 7, -8, 64, 100, -128, 127, 96, -33};
  const std::vector<double> fracs = {0.5, -0.25, 1.5, -3.75, 0.0078125, 2.5};
  for (DType from : all) {
    for (DType to : all) {
      const bool both_float = is_floating(from) && is_floating(to);
      const std::vector<double>& values = both_float ? fracs : ints;
      const Tensor src = ops::to(Tensor::from_vector(values, {int64_t(values.size())}), from);
      BOOST_TEST_REQUIRE(src.dtype() == from);
      const Tensor dst = ops::to(src, to);
      BOOST_TEST_REQUIRE(dst.dtype() == to);
      BOOST_TEST_REQUIRE(dst.shape() == src.shape());
      for (size_t i = 0; i < values.size(); ++i)
        BOOST_TEST(dst.at({int64_t(i)}) == values[i], dtype_name(from) << " -> " << dtype_name(to) << " element " << i);
      if (from == to)
        BOOST_TEST(dst.is_same(src));
      else
        BOOST_TEST(dst.storage() != src.storage());
      // Strided source: a transposed (3, 4) matrix.
      if (values.size() == 12) {
        const Tensor m = ops::transpose(ops::view(src, {4, 3}), 0, 1);  // (3, 4)
        const Tensor c = ops::to(m, to);
        BOOST_TEST_REQUIRE((c.is_contiguous() || from == to));
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 4; ++j)
            BOOST_TEST(c.at({i, j}) == values[size_t(j * 3 + i)], dtype_name(from) << " -> " << dtype_name(to));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(to_rounds_to_nearest_even_into_half_types) {
  // f32 -> f16 / bf16 through ops::to uses the same rounding as the scalar conversions.
  const std::vector<float> v = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11), 65520.0f,
                                1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)};
  const Tensor t = Tensor::from_vector(v, {5});
  const Tensor h = ops::to(t, DType::f16), b = ops::to(t, DType::bf16);
  for (int64_t i = 0; i < 5; ++i) {
    BOOST_TEST(h.data<f16>()[i].bits == f16::from_float(v[size_t(i)]));
    BOOST_TEST(b.data<bf16>()[i].bits == bf16::from_float(v[size_t(i)]));
  }
  BOOST_TEST(h.at({0}) == 1.0);
  BOOST_TEST(h.at({1}) == 1.0 + std::ldexp(1.0, -9));
  BOOST_TEST(std::isinf(h.at({2})));
  BOOST_TEST(b.at({3}) == 1.0);
  BOOST_TEST(b.at({4}) == 1.0 + std::ldexp(1.0, -6));
}

BOOST_AUTO_TEST_CASE(dtype_names_sizes_and_errors) {
  const std::vector<std::pair<DType, size_t>> all = {{DType::f32, 4}, {DType::f64, 8}, {DType::bf16, 2},
                                                     {DType::f16, 2}, {DType::i64, 8}, {DType::i32, 4},
                                                     {DType::i8, 1}};
  for (auto [t, size] : all) {
    BOOST_TEST(element_size(t) == size);
    BOOST_TEST(dtype_from_name(dtype_name(t)) == t);
  }
  BOOST_TEST(is_floating(DType::f32));
  BOOST_TEST(is_floating(DType::bf16));
  BOOST_TEST(!is_floating(DType::i64));
  BOOST_TEST(!is_floating(DType::i8));
  for (const std::string bad : {"float32", "F32", "", "f 32", "f32 ", "int64", "fp16"}) {
    try {
      dtype_from_name(bad);
      BOOST_ERROR("dtype_from_name('" << bad << "') did not throw");
    } catch (const Error& e) {
      BOOST_TEST(std::string(e.what()).find("'" + bad + "'") != std::string::npos, e.what());
    }
  }
}

BOOST_AUTO_TEST_CASE(device_parse) {
  BOOST_TEST((Device::parse("cpu") == Device::cpu()));
  BOOST_TEST((Device::parse("cuda") == Device::cuda(0)));
  BOOST_TEST((Device::parse("cuda:0") == Device::cuda(0)));
  const Device d = Device::parse("cuda:3");
  BOOST_TEST(d.is_cuda());
  BOOST_TEST(d.index == 3);
  BOOST_TEST(d.str() == "cuda:3");
  BOOST_TEST(Device::cpu().str() == "cpu");
  BOOST_TEST((Device::parse(Device::cuda(7).str()) == Device::cuda(7)));
  for (const std::string bad : {"gpu", "CPU", "", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "cuda:+1", " cuda",
                                "cuda:99999999999999999999", "cpu:0"}) {
    try {
      Device::parse(bad);
      BOOST_ERROR("Device::parse('" << bad << "') did not throw");
    } catch (const Error& e) {
      BOOST_TEST(std::string(e.what()).find("'" + bad + "'") != std::string::npos, e.what());
    } catch (const std::exception& e) {
      BOOST_ERROR("Device::parse('" << bad << "') threw a non-triad exception: " << e.what());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_dtype
