// Block-wise quantization (ops::quantize_blocks, dequantize_blocks, dequantize_reduce) on
// the CPU, against values the tests compute themselves: each block's scale is max |x| / qmax
// in double, q is decoded from the bytes here (nibbles by hand), and the round trip must
// come within half a scale of every value, up to f32 rounding. The compression formats (8,
// 4, 2 and 1 bits, symmetric and asymmetric) against a scalar reference written here, and
// the integer GEMM (ops::quantized_linear) against the f64 product of the dequantized
// operands.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "support/check.h"
#include "tensor/ops.h"
#include "tensor/quantized_matmul.h"

BOOST_AUTO_TEST_SUITE(test_quantize)

using namespace triad;

namespace {

const QuantFormat kInt8{8, 64}, kInt4{4, 64};

Tensor uniform(int64_t n, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty({n});
  Generator g(seed);
  ops::uniform_(t, lo, hi, g);
  return t;
}

Tensor floats(const std::vector<float>& v) { return Tensor::from_vector(v, {int64_t(v.size())}); }

// The integer value i of a row of packed bytes, decoded by hand: at 4 bits element 2j is
// the low nibble of byte j, 2j+1 the high one, each a two's complement number in [-8, 7].
int decode(const int8_t* bytes, int bits, int64_t i) {
  if (bits == 8) return bytes[i];
  const int byte = uint8_t(bytes[i / 2]);
  const int nibble = i % 2 ? byte >> 4 : byte & 15;
  return nibble >= 8 ? nibble - 16 : nibble;
}

Tensor dequantize(const Quantized& r, int64_t n, const QuantFormat& f, DType dtype = DType::f32) {
  Tensor out = Tensor::empty({n}, dtype);
  ops::dequantize_blocks(r.q, r.scales, out, f);
  return out;
}

// |x - x'| for every element, against half of its block's scale max |x| / qmax (computed
// here in double) plus f32 rounding: x inv and the inverse itself are rounded (relative
// 2^-24 each, on values up to qmax), and so is q scale. A block whose max is below 2^-119
// must have scale 0 and come back as zeros.
void check_round_trip(const std::vector<float>& x, const QuantFormat& f, const std::string& what) {
  const int64_t n = int64_t(x.size());
  const Quantized r = ops::quantize_blocks(floats(x), f);
  const std::vector<float> back = dequantize(r, n, f).to_vector<float>();
  const std::vector<float> scales = r.scales.to_vector<float>();
  BOOST_REQUIRE_EQUAL(int64_t(scales.size()), f.blocks(n));
  int64_t wrong = 0;
  for (int64_t b = 0; b < f.blocks(n); ++b) {
    double m = 0;
    for (int64_t i = b * f.block; i < std::min(n, (b + 1) * f.block); ++i) m = std::max(m, std::fabs(double(x[i])));
    const double scale = m < 0x1p-119 ? 0.0 : m / f.qmax();  // vanishing blocks come back as zeros
    BOOST_TEST(std::fabs(scales[b] - scale) <= scale * 0x1p-23, what << " block " << b << " scale " << scales[b]);
    const double bound = scale ? scale * (0.5 + 4 * f.qmax() * 0x1p-24) : 0x1p-119;
    for (int64_t i = b * f.block; i < std::min(n, (b + 1) * f.block); ++i)
      if (!(std::fabs(double(x[i]) - back[i]) <= bound)) ++wrong;
  }
  BOOST_TEST(wrong == 0, what << ": " << wrong << " values beyond half a scale");
}

}  // namespace

// Random blocks of several magnitudes, a partial last block, and an odd count at 4 bits.
BOOST_AUTO_TEST_CASE(round_trip_within_half_a_scale) {
  for (const QuantFormat& f : {kInt8, kInt4})
    for (int64_t n : {int64_t(1), int64_t(63), int64_t(64), int64_t(1000), int64_t(4097)}) {
      std::vector<float> x = uniform(n, 1, -1, 1).to_vector<float>();
      for (int64_t i = 0; i < n; ++i) x[i] *= std::ldexp(1.0f, int(i / f.block) % 7 * 5 - 15);  // 2^-15 .. 2^15
      check_round_trip(x, f, std::to_string(f.bits) + " bits, n " + std::to_string(n));
    }
  // The default format: 4096-element blocks.
  check_round_trip(uniform(3 * kQuantBlock + 5, 2, -3, 3).to_vector<float>(), QuantFormat{}, "default format");
}

// x = k scale, with scale a power of two and every block holding +-qmax scale: each block's
// scale is exactly that, q = k, and the values come back exactly.
BOOST_AUTO_TEST_CASE(values_on_the_grid_come_back_exactly) {
  for (const QuantFormat& f : {kInt8, kInt4}) {
    const float scale = 0.125f;
    const int64_t n = 4 * f.block + 9, levels = 2 * f.qmax() + 1;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = i % f.block == 0 ? (i / f.block % 2 ? -f.qmax() : f.qmax()) : i * 7 % levels - f.qmax();
      x[i] = float(k) * scale;
    }
    const Quantized r = ops::quantize_blocks(floats(x), f);
    const std::vector<float> scales = r.scales.to_vector<float>(), back = dequantize(r, n, f).to_vector<float>();
    BOOST_TEST(scales == std::vector<float>(size_t(f.blocks(n)), scale), boost::test_tools::per_element());
    for (int64_t i = 0; i < n; ++i) {
      BOOST_TEST(decode(r.q.data<int8_t>(), f.bits, i) == std::lround(x[i] / scale), f.bits << " bits, element " << i);
      BOOST_TEST(back[i] == x[i], f.bits << " bits, element " << i);
    }
  }
}

// Halfway values round to the even integer: scale 1 (max 127), 2.5 -> 2, 3.5 -> 4.
BOOST_AUTO_TEST_CASE(ties_round_to_even) {
  const std::vector<float> x = {127, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f};
  const std::vector<int> want = {127, 2, 4, -2, -4, 0, 0, 2, 126};
  const Quantized r = ops::quantize_blocks(floats(x), kInt8);
  for (size_t i = 0; i < x.size(); ++i) BOOST_TEST(decode(r.q.data<int8_t>(), 8, int64_t(i)) == want[i]);
}

// Blocks of zeros, and of values too small for an f32 scale (max below 2^-119), come back as
// zeros with scale 0; a block just above that keeps its values.
BOOST_AUTO_TEST_CASE(zero_and_vanishing_blocks) {
  for (const QuantFormat& f : {kInt8, kInt4}) {
    std::vector<float> x(4 * 64, 0.0f);
    for (int i = 64; i < 128; ++i) x[i] = (i % 2 ? 1 : -1) * std::ldexp(1.0f, -120);  // below 2^-119
    for (int i = 128; i < 192; ++i) x[i] = (i % 3 - 1) * std::ldexp(1.0f, -118);      // above
    x[200] = 1.0f;
    const Quantized r = ops::quantize_blocks(floats(x), f);
    const std::vector<float> scales = r.scales.to_vector<float>(), back = dequantize(r, 256, f).to_vector<float>();
    BOOST_TEST(scales[0] == 0.0f);
    BOOST_TEST(scales[1] == 0.0f);
    for (int64_t i = 0; i < 128; ++i) {
      BOOST_TEST(decode(r.q.data<int8_t>(), f.bits, i) == 0);
      BOOST_TEST(back[i] == 0.0f);
    }
    for (int64_t i = 128; i < 192; ++i)  // -max, 0, max
      BOOST_TEST(decode(r.q.data<int8_t>(), f.bits, i) == (i % 3 - 1) * f.qmax());
    check_round_trip(x, f, std::to_string(f.bits) + " bits");  // and block 2's scale, 2^-118 / qmax
  }
}

// One huge value sets the block's scale: the others round to 0 and stay within half of it.
BOOST_AUTO_TEST_CASE(one_huge_value_in_a_block) {
  for (const QuantFormat& f : {kInt8, kInt4}) {
    std::vector<float> x = uniform(128, 3, -1, 1).to_vector<float>();
    x[77] = 1e6f;
    const Quantized r = ops::quantize_blocks(floats(x), f);
    for (int64_t i = 64; i < 128; ++i)
      BOOST_TEST(decode(r.q.data<int8_t>(), f.bits, i) == (i == 77 ? f.qmax() : 0), f.bits << " bits, " << i);
    check_round_trip(x, f, std::to_string(f.bits) + " bits");
  }
}

// Note the contract in tensor/ops.h: a block holding NaN or +-inf dequantizes to NaN
// throughout (scale NaN, q 0), so an overflow check after a quantized collective sees it;
// the other blocks are untouched.
BOOST_AUTO_TEST_CASE(non_finite_blocks_come_back_as_nan) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const QuantFormat& f : {kInt8, kInt4})
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), inf, -inf})
      for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        const std::string what = std::to_string(f.bits) + " bits, " + std::to_string(bad) + ", " + dtype_name(dt);
        std::vector<float> x = uniform(3 * 64 + 1, 4, -1, 1).to_vector<float>();
        x[64 + 9] = bad;
        const Quantized r = ops::quantize_blocks(ops::to(floats(x), dt), f);
        const std::vector<float> scales = r.scales.to_vector<float>();
        BOOST_TEST(std::isnan(scales[1]), what);
        BOOST_TEST(std::isfinite(scales[0]), what);
        const std::vector<float> back = dequantize(r, 3 * 64 + 1, f, dt).to_vector<float>();
        for (int64_t i = 0; i < int64_t(back.size()); ++i) {
          const bool in_bad_block = i / 64 == 1;
          BOOST_TEST(std::isnan(back[i]) == in_bad_block, what << ", element " << i);
          if (in_bad_block) BOOST_TEST(decode(r.q.data<int8_t>(), f.bits, i) == 0, what);
        }
        BOOST_TEST(!ops::all_finite(dequantize(r, 3 * 64 + 1, f)), what);
      }
}

// The bytes themselves, computed by hand (scale 1: max |x| is qmax).
BOOST_AUTO_TEST_CASE(packed_bytes) {
  auto bytes = [](const Quantized& r) {
    const int8_t* p = r.q.data<int8_t>();
    std::vector<int> v;
    for (int64_t i = 0; i < r.q.numel(); ++i) v.push_back(uint8_t(p[i]));
    return v;
  };
  // 4 bits: (1, -1) -> 0xF1, (7, -7) -> 0x97, (0, 3) -> 0x30, (-2, 5) -> 0x5E.
  const Quantized even = ops::quantize_blocks(floats({1, -1, 7, -7, 0, 3, -2, 5}), QuantFormat{4, 8});
  BOOST_TEST(bytes(even) == (std::vector<int>{0xF1, 0x97, 0x30, 0x5E}), boost::test_tools::per_element());
  // An odd count: the last byte's high nibble is 0. Blocks of 2: (7, -3) -> 0xD7; (-7) -> 0x09.
  const Quantized odd = ops::quantize_blocks(floats({7, -3, -7}), QuantFormat{4, 2});
  BOOST_TEST(bytes(odd) == (std::vector<int>{0xD7, 0x09}), boost::test_tools::per_element());
  BOOST_TEST(odd.scales.to_vector<float>() == (std::vector<float>{1, 1}), boost::test_tools::per_element());
  // 8 bits: one two's complement byte per value.
  const Quantized int8 = ops::quantize_blocks(floats({127, -127, 0, 5, -1}), QuantFormat{8, 8});
  BOOST_TEST(bytes(int8) == (std::vector<int>{0x7F, 0x81, 0x00, 0x05, 0xFF}), boost::test_tools::per_element());
}

// Rows along the last dimension are quantized on their own (odd rows at 4 bits pad their
// own last byte), and q and scales keep the leading dimensions.
BOOST_AUTO_TEST_CASE(rows_are_quantized_on_their_own) {
  for (const QuantFormat& f : {kInt8, kInt4}) {
    const int64_t rows = 3, n = 101;
    const Tensor x = ops::view(uniform(rows * n, 5, -2, 2), {rows, n});
    const Quantized r = ops::quantize_blocks(x, f);
    BOOST_TEST(r.q.shape() == (Shape{rows, f.bytes(n)}));
    BOOST_TEST(r.scales.shape() == (Shape{rows, f.blocks(n)}));
    Tensor back = Tensor::empty({rows, n});
    ops::dequantize_blocks(r.q, r.scales, back, f);
    for (int64_t i = 0; i < rows; ++i) {
      const Quantized one = ops::quantize_blocks(ops::contiguous(ops::select(x, 0, i)), f);
      BOOST_TEST(std::memcmp(one.q.raw_data(), r.q.data<int8_t>() + i * f.bytes(n), size_t(f.bytes(n))) == 0);
      BOOST_TEST(one.scales.to_vector<float>() == ops::select(r.scales, 0, i).to_vector<float>(),
                 boost::test_tools::per_element());
      BOOST_TEST(dequantize(one, n, f).to_vector<float>() == ops::select(back, 0, i).to_vector<float>(),
                 boost::test_tools::per_element());
    }
  }
}

// The fused sum of k slices against each slice decoded here and added in double.
BOOST_AUTO_TEST_CASE(dequantize_reduce_sums_the_slices) {
  for (const QuantFormat& f : {kInt8, kInt4})
    for (int64_t n : {int64_t(1), int64_t(129), int64_t(3000)}) {
      const int64_t k = 5;
      const Tensor x = ops::view(uniform(k * n, 6, -4, 4), {k, n});
      const Quantized r = ops::quantize_blocks(x, f);
      const std::vector<float> scales = r.scales.to_vector<float>();
      // Per element: the sum in double, and the sum of |terms|, which bounds f32's rounding
      // (each product and each of the k additions: relative 2^-24 of at most that much).
      std::vector<double> want(size_t(n), 0.0), magnitude(size_t(n), 0.0);
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = 0; i < n; ++i) {
          const double v =
              decode(r.q.data<int8_t>() + j * f.bytes(n), f.bits, i) * double(scales[j * f.blocks(n) + i / f.block]);
          want[i] += v;
          magnitude[i] += std::fabs(v);
        }
      for (DType dt : {DType::f32, DType::bf16}) {
        Tensor out = Tensor::empty({n}, dt);
        ops::dequantize_reduce(r.q, r.scales, out, f);
        const std::vector<double> got = out.to_vector<double>();
        for (int64_t i = 0; i < n; ++i) {
          // bf16 rounds the f32 sum once more: half its unit, 2^-8 relative.
          const double tol = 2 * k * magnitude[i] * 0x1p-24 + (dt == DType::bf16 ? std::fabs(want[i]) * 0x1p-8 : 0.0);
          BOOST_TEST(std::fabs(got[i] - want[i]) <= tol,
                     f.bits << " bits, n " << n << ", " << dtype_name(dt) << ", " << i);
        }
      }
      // One slice: exactly dequantize_blocks.
      Tensor one = Tensor::empty({n});
      ops::dequantize_reduce(ops::narrow(r.q, 0, 2, 1), ops::narrow(r.scales, 0, 2, 1), one, f);
      Tensor plain = Tensor::empty({n});
      ops::dequantize_blocks(ops::select(r.q, 0, 2), ops::select(r.scales, 0, 2), plain, f);
      BOOST_TEST(one.to_vector<float>() == plain.to_vector<float>(), boost::test_tools::per_element());
    }
  // No slices: zeros.
  Tensor out = Tensor::full({10}, 3.0);
  ops::dequantize_reduce(Tensor::empty({0, 10}, DType::i8), Tensor::empty({0, 1}), out, QuantFormat{8, 64});
  BOOST_TEST(out.to_vector<float>() == std::vector<float>(10, 0.0f), boost::test_tools::per_element());
}

// 16-bit sources convert on load: the same values in bf16, f16 and f32 quantize to the same
// bytes and scales; a 16-bit output holds the f32 result rounded once.
BOOST_AUTO_TEST_CASE(sixteen_bit_sources_and_outputs) {
  for (const QuantFormat& f : {kInt8, kInt4})
    for (DType dt : {DType::bf16, DType::f16}) {
      const Tensor x16 = ops::to(uniform(300, 7, -3, 3), dt), x32 = ops::to(x16, DType::f32);
      const Quantized a = ops::quantize_blocks(x16, f), b = ops::quantize_blocks(x32, f);
      BOOST_TEST(std::memcmp(a.q.raw_data(), b.q.raw_data(), a.q.nbytes()) == 0, dtype_name(dt));
      BOOST_TEST(a.scales.to_vector<float>() == b.scales.to_vector<float>(), boost::test_tools::per_element());
      check_round_trip(x32.to_vector<float>(), f, std::string(dtype_name(dt)) + " source");
      const Tensor back16 = dequantize(a, 300, f, dt);
      const Tensor want = ops::to(dequantize(a, 300, f), dt);
      BOOST_TEST(std::memcmp(back16.raw_data(), want.raw_data(), want.nbytes()) == 0, dtype_name(dt) << " output");
    }
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw) {
  const Tensor x = uniform(100, 8, -1, 1);
  test::check_error(
      [&] {
        ops::quantize_blocks(x, QuantFormat{5, 64});
      },
      {"quantize_blocks", "bits must be 8, 4, 2 or 1"});
  test::check_error([&] { ops::quantize_blocks(x, QuantFormat{8, 0}); }, {"quantize_blocks", "block must be positive"});
  test::check_error([&] { ops::quantize_blocks(x, QuantFormat{4, 63}); }, {"quantize_blocks", "whole bytes"});
  test::check_error([&] { ops::quantize_blocks(ops::to(x, DType::f64), kInt8); }, {"quantize_blocks", "f64"});
  test::check_error([&] { ops::quantize_blocks(Tensor::scalar(1.0), kInt8); }, {"quantize_blocks", "1 dimension"});
  const Quantized r = ops::quantize_blocks(x, kInt4);
  Tensor out = Tensor::empty({100});
  test::check_error([&] { ops::dequantize_blocks(r.q, r.scales, out, kInt8); },
                    {"dequantize_blocks", "q of i8 (100,)"});
  test::check_error(
      [&] {
        ops::dequantize_blocks(r.q, r.scales, out, QuantFormat{4, 32});
      },
      {"dequantize_blocks", "scales of f32 (4,)"});
  test::check_error([&] { ops::dequantize_blocks(r.q, r.scales, Tensor::empty({100}, DType::i32), kInt4); },
                    {"dequantize_blocks", "contiguous f32, bf16 or f16 output"});
  test::check_error(
      [&] {
        ops::dequantize_blocks(r.q, r.scales, ops::transpose(Tensor::empty({10, 10}), 0, 1), kInt4);
      },
      {"dequantize_blocks", "contiguous"});
  test::check_error([&] { ops::dequantize_reduce(r.q, r.scales, out, kInt4); }, {"dequantize_reduce", "(k, bytes)"});
}

namespace {

// The field of element i of a row packed at `bits`, decoded by hand (binary: 0 -> -1, 1 -> +1).
int field(const int8_t* row, int bits, bool binary, int64_t i) {
  int u = 0;
  for (int b = 0; b < bits; ++b) {
    const int64_t bit = i * bits + b;
    u |= ((uint8_t(row[bit / 8]) >> (bit % 8)) & 1) << b;
  }
  if (binary) return 2 * u - 1;
  return u >= (1 << (bits - 1)) ? u - (1 << bits) : u;
}

// One block's expected scale, offset and integers, computed here in f32 as documented.
struct RefBlock {
  float scale = 0, offset = 0;
  std::vector<int> q;
};

RefBlock reference_block(const float* x, int64_t len, const QuantFormat& f) {
  RefBlock r;
  float lo = x[0], hi = x[0];
  double abs_sum = 0;
  for (int64_t i = 0; i < len; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]), abs_sum += std::fabs(x[i]);
  if (f.symmetric && f.bits == 1) {
    r.scale = float(abs_sum / double(len));
    for (int64_t i = 0; i < len; ++i) r.q.push_back(x[i] >= 0 ? 1 : -1);
  } else if (f.symmetric && f.bits == 2) {
    const float threshold = float(0.7 * abs_sum / double(len));
    double above_sum = 0;
    int above = 0;
    for (int64_t i = 0; i < len; ++i) {
      const bool big = std::fabs(x[i]) > threshold;
      r.q.push_back(big ? (x[i] > 0 ? 1 : -1) : 0);
      if (big) above_sum += std::fabs(x[i]), ++above;
    }
    r.scale = float(above_sum / above);
  } else if (f.symmetric) {
    const float m = std::max(-lo, hi), inv = float(f.qmax()) / m;
    r.scale = m / float(f.qmax());
    for (int64_t i = 0; i < len; ++i)
      r.q.push_back(int(std::clamp(std::nearbyint(x[i] * inv), -float(f.qmax()), float(f.qmax()))));
  } else {
    const int levels = (1 << f.bits) - 1, half = 1 << (f.bits - 1);
    const float inv = float(levels) / (hi - lo);
    r.scale = (hi - lo) / float(levels);
    r.offset = lo + float(half) * r.scale;
    for (int64_t i = 0; i < len; ++i)
      r.q.push_back(int(std::clamp(std::nearbyint((x[i] - lo) * inv), 0.0f, float(levels))) - half);
  }
  return r;
}

std::string format_str(const QuantFormat& f) {
  return std::to_string(f.bits) + "-bit " + (f.symmetric ? "symmetric" : "asymmetric") + " groups of " +
         std::to_string(f.block);
}

}  // namespace

// Every bit width, both kinds and several group sizes (the last group of a row shorter):
// integers exact, scales and offsets to f32 rounding, the round trip within half a scale
// of each value (binary and ternary: exactly q scale).
BOOST_AUTO_TEST_CASE(compression_formats_against_a_scalar_reference) {
  const int64_t rows = 3, n = 100;
  Tensor x = Tensor::empty({rows, n});
  Generator g(21);
  ops::uniform_(x, -2.0, 3.0, g);
  const std::vector<float> xs = x.to_vector<float>();
  for (int bits : {8, 4, 2, 1})
    for (bool symmetric : {true, false})
      for (int64_t block : {8, 16, 64, 128}) {
        const QuantFormat f{bits, block, symmetric};
        const std::string what = format_str(f);
        const Quantized r = ops::quantize_blocks(x, f);
        BOOST_REQUIRE(r.q.shape() == Shape({rows, f.bytes(n)}));
        BOOST_REQUIRE(r.offsets.defined() == !symmetric);
        Tensor back = Tensor::empty({rows, n});
        ops::dequantize_blocks(r, back, f);
        const std::vector<float> scales = r.scales.to_vector<float>(), bk = back.to_vector<float>();
        const std::vector<float> offsets = symmetric ? std::vector<float>() : r.offsets.to_vector<float>();
        const int8_t* q = r.q.data<int8_t>();
        int64_t wrong_q = 0, wrong_back = 0;
        for (int64_t row = 0; row < rows; ++row)
          for (int64_t b = 0; b < f.blocks(n); ++b) {
            const int64_t begin = b * block, len = std::min(block, n - begin), at = row * f.blocks(n) + b;
            const RefBlock ref = reference_block(xs.data() + row * n + begin, len, f);
            BOOST_TEST(std::fabs(scales[at] - ref.scale) <= ref.scale * 0x1p-23, what << " scale " << at);
            if (!symmetric)
              BOOST_TEST(
                  std::fabs(offsets[at] - ref.offset) <= 4 * ref.scale * 0x1p-23 + std::fabs(ref.offset) * 0x1p-23,
                  what << " offset " << at);
            for (int64_t i = 0; i < len; ++i) {
              const int got = field(q + row * f.bytes(n), bits, symmetric && bits == 1, begin + i);
              if (got != ref.q[size_t(i)]) ++wrong_q;
              const double v = xs[size_t(row * n + begin + i)], y = bk[size_t(row * n + begin + i)];
              const bool levels = symmetric && bits <= 2;  // binary and ternary: exactly q scale
              const double bound = levels ? 0 : ref.scale * (0.5 + 4 * (1 << bits) * 0x1p-24) + std::fabs(v) * 0x1p-22;
              const double expected = levels ? ref.q[size_t(i)] * double(scales[at]) : v;
              if (!(std::fabs(expected - y) <= bound)) ++wrong_back;
            }
          }
        BOOST_TEST(wrong_q == 0, what << ": " << wrong_q << " integers differ from the reference");
        BOOST_TEST(wrong_back == 0, what << ": " << wrong_back << " values beyond the round-trip bound");
      }
}

// Asymmetric blocks of equal values (scale 0) come back exactly; non-finite ones as NaN.
BOOST_AUTO_TEST_CASE(compression_formats_special_blocks) {
  std::vector<float> v(16, 2.5f);
  v[9] = std::numeric_limits<float>::infinity();
  const Tensor x = floats(v);
  for (int bits : {8, 4, 2, 1}) {
    const QuantFormat f{bits, 8, false};
    const Quantized r = ops::quantize_blocks(x, f);
    Tensor back = Tensor::empty({16});
    ops::dequantize_blocks(r, back, f);
    const std::vector<float> b = back.to_vector<float>();
    for (int i = 0; i < 8; ++i) BOOST_TEST(b[size_t(i)] == 2.5f, bits << " bits, value " << i);
    for (int i = 8; i < 16; ++i) BOOST_TEST(std::isnan(b[size_t(i)]), bits << " bits, value " << i);
  }
}

namespace {

// y (m, n) in f64 = the dequantized tokens (abits 8; else x itself) times the dequantized
// weight, plus bias; `mag` the sum of |a w| + |bias| per output, the scale of f32 rounding.
void reference_linear(const Tensor& x, const Tensor& w_dq, const std::vector<float>& bias, int abits,
                      std::vector<double>& y, std::vector<double>& mag) {
  const int64_t m = x.size(0), k = x.size(1), n = w_dq.size(0);
  Tensor a = x;
  if (abits == 8) {
    const Quantized t = ops::quantize_blocks(x, QuantFormat{8, k});
    a = Tensor::empty({m, k});
    ops::dequantize_blocks(t.q, t.scales, a, QuantFormat{8, k});
  }
  const std::vector<float> av = a.to_vector<float>(), wv = w_dq.to_vector<float>();
  y.assign(size_t(m * n), 0);
  mag.assign(size_t(m * n), 0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double s = bias.empty() ? 0 : bias[size_t(c)], t = std::fabs(s);
      for (int64_t i = 0; i < k; ++i) {
        s += double(av[size_t(r * k + i)]) * wv[size_t(c * k + i)];
        t += std::fabs(double(av[size_t(r * k + i)]) * wv[size_t(c * k + i)]);
      }
      y[size_t(r * n + c)] = s;
      mag[size_t(r * n + c)] = t;
    }
}

}  // namespace

// The integer GEMM (every kernel this CPU runs) equals the f64 GEMM of the same dequantized
// operands to f32 rounding, for every weight format, token counts around the 4-row register
// block and column counts around the 32-column one; the A16 path likewise with unquantized tokens.
BOOST_AUTO_TEST_CASE(quantized_linear_equals_the_dequantized_gemm) {
  const int64_t k = 128;
  Generator g(5);
  for (int64_t n : {1, 17, 40, 70})
    for (int64_t m : {1, 3, 5, 9}) {
      Tensor w = Tensor::empty({n, k}), x = Tensor::empty({m, k}), bias = Tensor::empty({n});
      ops::uniform_(w, -0.5, 0.7, g);
      ops::uniform_(x, -3.0, 2.0, g);
      ops::uniform_(bias, -1.0, 1.0, g);
      for (int bits : {8, 4, 2, 1})
        for (bool symmetric : {true, false})
          for (int64_t group : {32, 128}) {
            const QuantFormat f{bits, group, symmetric};
            const Quantized q = ops::quantize_blocks(w, f);
            Tensor w_dq = Tensor::empty({n, k});
            ops::dequantize_blocks(q, w_dq, f);
            const PackedWeight packed = ops::pack_weight(q, n, k, f);
            const bool with_bias = (n + m) % 2 == 0;
            const std::vector<float> bv = with_bias ? bias.to_vector<float>() : std::vector<float>();
            for (int abits : {8, 16})
              for (Int8Kernel kernel : ops::cpu_int8_kernels()) {
                if (abits == 16 && kernel != Int8Kernel::portable) continue;  // one A16 path
                const std::vector<float> y =
                    ops::quantized_linear(x, packed, with_bias ? bias : Tensor(), abits, kernel).to_vector<float>();
                std::vector<double> ref, mag;
                reference_linear(x, w_dq, bv, abits, ref, mag);
                int64_t wrong = 0;
                for (size_t i = 0; i < y.size(); ++i)
                  if (!(std::fabs(y[i] - ref[i]) <= mag[i] * 1e-5 + 1e-6)) ++wrong;
                BOOST_TEST(wrong == 0, format_str(f) << " W(" << n << ", " << k << ") x (" << m << ") A" << abits << " "
                                                     << int8_kernel_name(kernel) << ": " << wrong << " outputs off");
              }
          }
    }
}

// The integer kernels sum the same integers: on operands whose products are exact in
// f32 (small integers, power-of-two scales) they agree exactly with the f64 reference.
BOOST_AUTO_TEST_CASE(quantized_linear_integer_sums_are_exact) {
  const int64_t n = 33, k = 64, m = 6;
  std::vector<float> wv(size_t(n * k)), xv(size_t(m * k));
  for (int64_t i = 0; i < n * k; ++i) wv[size_t(i)] = float((i * 7) % 15 - 7);  // in [-7, 7], max 7 in each group
  for (int64_t i = 0; i < m * k; ++i) xv[size_t(i)] = float((i * 13) % 255 - 127);
  for (int64_t r = 0; r < m; ++r) xv[size_t(r * k)] = 127;  // every token's scale is 1
  const Tensor w = Tensor::from_vector(wv, {n, k}), x = Tensor::from_vector(xv, {m, k});
  const QuantFormat f{4, 32};
  const PackedWeight packed = ops::pack_weight(ops::quantize_blocks(w, f), n, k, f);
  for (Int8Kernel kernel : ops::cpu_int8_kernels()) {
    const std::vector<float> y = ops::quantized_linear(x, packed, Tensor(), 8, kernel).to_vector<float>();
    int64_t wrong = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += double(xv[size_t(r * k + i)]) * wv[size_t(c * k + i)];
        if (y[size_t(r * n + c)] != float(s)) ++wrong;
      }
    BOOST_TEST(wrong == 0, int8_kernel_name(kernel) << ": " << wrong << " sums differ");
  }
}

// Every kernel sums the integers exactly at each format's extremes: every weight at its most
// negative value (-128, -8, -2, as an asymmetric format stores them) times tokens all at +127
// (u8 255), over one group of 256 inputs, so that a kernel holding partial sums in 16 bits
// must widen them in time; the sums are exact in f32.
BOOST_AUTO_TEST_CASE(quantized_linear_sums_at_the_formats_extremes_are_exact) {
  const int64_t n = 16, k = 256;
  for (int bits : {8, 4, 2}) {
    const QuantFormat f{bits, k, /*symmetric=*/false};
    const int lowest = -(1 << (bits - 1));
    std::vector<int8_t> bytes(size_t(n * f.bytes(k)));
    for (int8_t& b : bytes) {
      int v = 0;
      for (int at = 0; at < 8; at += bits) v |= (lowest & ((1 << bits) - 1)) << at;
      b = int8_t(uint8_t(v));
    }
    Quantized q{Tensor::from_vector(bytes, {n, f.bytes(k)}), Tensor::full({n, 1}, 1.0), Tensor::zeros({n, 1})};
    const PackedWeight packed = ops::pack_weight(q, n, k, f);
    const Tensor x = Tensor::full({2, k}, 127.0);
    for (Int8Kernel kernel : ops::cpu_int8_kernels()) {
      const std::vector<float> y = ops::quantized_linear(x, packed, Tensor(), 8, kernel).to_vector<float>();
      int64_t wrong = 0;
      for (float v : y) wrong += v != float(127 * lowest * k);
      BOOST_TEST(wrong == 0, bits << " bits, " << int8_kernel_name(kernel) << ": " << wrong << " sums differ");
    }
  }
}

// The kernels this CPU runs end with the portable one; a kernel it lacks is a named error.
BOOST_AUTO_TEST_CASE(quantized_linear_kernels_of_this_cpu) {
  const std::vector<Int8Kernel> kernels = ops::cpu_int8_kernels();
  BOOST_TEST_MESSAGE("integer kernels of this CPU: " << int8_kernel_name(kernels.front()) << " first of "
                                                     << kernels.size());
  BOOST_TEST((kernels.back() == Int8Kernel::portable));
  const QuantFormat f{8, 32};
  const PackedWeight packed =
      ops::pack_weight(ops::quantize_blocks(ops::reshape(uniform(64, 7, -1, 1), {2, 32}), f), 2, 32, f);
  for (Int8Kernel kernel : {Int8Kernel::avx512_vnni, Int8Kernel::avx2})
    if (std::find(kernels.begin(), kernels.end(), kernel) == kernels.end())
      test::check_error(
          [&] {
            ops::quantized_linear(ops::reshape(uniform(32, 8, -1, 1), {1, 32}), packed, Tensor(), 8, kernel);
          },
          {"quantized_linear", std::string("cannot run the ") + int8_kernel_name(kernel)});
}

// ops::packed_rows looks rows up in a packed weight: each row equals ops::dequantize_blocks
// of that row's q and scales bit for bit (a zero block's values +0, a non-finite block's NaN),
// for every symmetric format, groups of 8 and 32 and a whole row, rows in every tile of 16
// columns (the last padded), i64 and i32 indices of any shape, repeats among them.
BOOST_AUTO_TEST_CASE(packed_rows_equal_the_dequantized_rows) {
  const int64_t n = 70, k = 64;
  Tensor w = Tensor::empty({n, k});
  Generator g(21);
  ops::uniform_(w, -0.6, 0.5, g);
  ops::fill_(ops::narrow(ops::select(w, 0, 5), 0, 0, 32), 0.0);  // a zero block (group 32): scale 0
  ops::fill_(ops::narrow(ops::select(w, 0, 9), 0, 8, 1), std::numeric_limits<double>::quiet_NaN());
  const std::vector<int64_t> ids{0, 5, 9, 69, 16, 5, 31, 48, 33, 15, 0, 64};
  for (int bits : {8, 4, 2, 1})
    for (int64_t group : {8, 32, 64}) {
      const QuantFormat f{bits, group};
      const Quantized q = ops::quantize_blocks(w, f);
      Tensor table = Tensor::empty({n, k});
      ops::dequantize_blocks(q, table, f);
      const PackedWeight packed = ops::pack_weight(q, n, k, f);
      for (DType t : {DType::i64, DType::i32}) {
        const Tensor idx = ops::to(Tensor::from_vector(ids, {3, 4}), t);
        const Tensor got = ops::packed_rows(packed, idx), want = ops::embedding(table, idx);
        BOOST_TEST((got.shape() == Shape{3, 4, k}));
        BOOST_TEST((got.dtype() == DType::f32));
        BOOST_TEST(std::memcmp(got.raw_data(), want.raw_data(), size_t(want.nbytes())) == 0,
                   format_str(f) << ", " << dtype_name(t) << " indices: rows differ from dequantize_blocks'");
      }
    }
  const QuantFormat f{8, 32};
  const PackedWeight packed = ops::pack_weight(ops::quantize_blocks(w, f), n, k, f);
  BOOST_TEST(ops::packed_rows(packed, Tensor::empty({0}, DType::i64)).numel() == 0);
  test::check_error(
      [&] {
        ops::packed_rows(packed, Tensor::from_vector(std::vector<int64_t>{3, 70}, {2}));
      },
      {"packed_rows", "index 70 at position 1", "out of range [0, 70)"});
  test::check_error([&] { ops::packed_rows(packed, Tensor::zeros({2})); },
                    {"packed_rows", "indices must be i64 or i32"});
  const QuantFormat asym{8, 32, false};
  const PackedWeight asymmetric = ops::pack_weight(ops::quantize_blocks(w, asym), n, k, asym);
  test::check_error([&] { ops::packed_rows(asymmetric, Tensor::zeros({1}, DType::i64)); },
                    {"packed_rows", "expected a symmetric format"});
}

BOOST_AUTO_TEST_CASE(compression_bad_arguments_throw) {
  const Tensor w = uniform(96, 3, -1, 1);
  const Tensor w2 = ops::reshape(w, {2, 48});
  test::check_error(
      [&] {
        ops::quantize_blocks(w, QuantFormat{3, 8});
      },
      {"quantize_blocks", "bits must be 8, 4, 2 or 1"});
  test::check_error(
      [&] {
        ops::quantize_blocks(w, QuantFormat{2, 6});
      },
      {"quantize_blocks", "2-bit block", "whole bytes"});
  test::check_error([&] { ops::quantize_blocks(w, QuantFormat{1, 12, false}); }, {"quantize_blocks", "multiple of 8"});
  const QuantFormat asym{4, 16, false};
  const Quantized r = ops::quantize_blocks(w2, asym);
  Tensor out = Tensor::empty({2, 48});
  test::check_error([&] { ops::dequantize_blocks(r.q, r.scales, out, asym); }, {"dequantize_blocks", "needs offsets"});
  const QuantFormat g32{8, 32};
  test::check_error([&] { ops::pack_weight(ops::quantize_blocks(w2, g32), 2, 48, g32); },
                    {"pack_weight", "group size 32", "divide the input dimension 48"});
  const QuantFormat g6{8, 6};
  test::check_error([&] { ops::pack_weight(ops::quantize_blocks(w2, g6), 2, 48, g6); },
                    {"pack_weight", "multiple of 4"});
  const QuantFormat g16{8, 16};
  const PackedWeight p = ops::pack_weight(ops::quantize_blocks(w2, g16), 2, 48, g16);
  test::check_error(
      [&] {
        ops::quantized_linear(Tensor::empty({3, 48}), p, Tensor(), 4);
      },
      {"quantized_linear", "activation bits must be 8 or 16, got 4"});
  test::check_error(
      [&] {
        ops::quantized_linear(Tensor::empty({3, 40}), p, Tensor(), 8);
      },
      {"quantized_linear", "(..., 48)"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_quantize
