// The bf16 and f16 conversions of tensor/float16.h, which the CPU's dtypes and the CUDA
// kernels share, on the bits test_dtype leaves open: what a NaN becomes. bf16 keeps the
// sign and the upper payload and sets the quiet bit; f16 becomes its quiet NaN 0x7e00 with
// the sign. Every NaN is checked: each 16-bit NaN pattern through float and back, and every
// f32 NaN (2 · (2^23 − 1) of them).
#include <boost/test/unit_test.hpp>
#include <cstring>

#include "tensor/float16.h"

BOOST_AUTO_TEST_SUITE(test_float16)

using namespace triad;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_16_bit_nan_comes_back_quiet_with_its_sign) {
  int bf16_nans = 0, f16_nans = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t b = uint16_t(h);
    if ((b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0) {
      ++bf16_nans;
      BOOST_TEST_REQUIRE(float_to_bf16(bf16_to_float(b)) == uint16_t(b | 0x40u), "bf16 pattern " << h);
    }
    if ((b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0) {
      ++f16_nans;
      BOOST_TEST_REQUIRE(float_to_f16(f16_to_float(b)) == uint16_t((b & 0x8000u) | 0x7e00u), "f16 pattern " << h);
    }
  }
  BOOST_TEST(bf16_nans == 2 * 127);
  BOOST_TEST(f16_nans == 2 * 1023);
}

BOOST_AUTO_TEST_CASE(every_f32_nan_converts_to_a_quiet_nan_with_its_sign) {
  int failures = 0;
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t payload = 1; payload < 0x800000u; ++payload) {
      const uint32_t u = sign | 0x7f800000u | payload;
      const float f = from_bits(u);
      const bool ok =
          float_to_bf16(f) == uint16_t((u >> 16) | 0x40u) && float_to_f16(f) == uint16_t((sign >> 16) | 0x7e00u);
      if (!ok && ++failures <= 10) BOOST_ERROR("float bits 0x" << std::hex << u);
    }
  BOOST_TEST(failures == 0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_float16
