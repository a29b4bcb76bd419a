// Block quantization (zero/block_quantize.h) against values worked out here: every element
// within half a step (s/2, s = block max / qmax) of its input, exact on the grid, zeros for
// an all-zero block, int4 bytes packed low nibble first, a huge value only coarsening its
// own block, NaN and infinity poisoning their block, and dequantize_sum the sum of the
// chunks' dequantized values.
#define BOOST_TEST_MODULE block_quantize
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "support/check.h"
#include "triad.h"
#include "zero/block_quantize.h"

using namespace triad;
using namespace triad::zero;
using test::max_abs_diff;

namespace {

struct RoundTrip {
  Tensor q, scales, back;
};
RoundTrip round_trip(const Tensor& x, int bits, int64_t block) {
  const int64_t n = x.numel();
  RoundTrip r{Tensor::empty({quantized_bytes(n, bits)}, DType::i8),
              Tensor::empty({quantized_blocks(n, block)}, DType::f32), Tensor::empty({n}, x.dtype())};
  quantize_blocks(x, bits, block, r.q, r.scales);
  dequantize_blocks(r.q, r.scales, bits, block, r.back);
  return r;
}

Tensor random(int64_t n, uint64_t seed, double range) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n});
  ops::uniform_(x, -range, range, gen);
  return x;
}

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_within_half_a_step) {
  for (int bits : {8, 4})
    for (int64_t n : {1, 7, 64, 1001}) {  // partial last blocks, odd counts for int4
      const int64_t block = 64;
      const Tensor x = random(n, 5 + uint64_t(n), 3.0);
      const RoundTrip r = round_trip(x, bits, block);
      const std::vector<float> v = x.to_vector<float>(), back = r.back.to_vector<float>();
      for (int64_t b = 0; b < quantized_blocks(n, block); ++b) {
        float amax = 0;
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) amax = std::max(amax, std::fabs(v[i]));
        const float s = amax / (bits == 8 ? 127.0f : 7.0f);
        BOOST_TEST(r.scales.to_vector<float>()[size_t(b)] == s);
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
          BOOST_TEST(std::fabs(back[i] - v[i]) <= s / 2 * (1 + 1e-6f), "bits " << bits << " n " << n << " i " << i);
      }
    }
}

BOOST_AUTO_TEST_CASE(values_on_the_grid_are_exact_and_zeros_stay_zero) {
  // Block 0: k·0.25 for k in -7..7 (s = 1.75/7 = 0.25); block 1: zeros.
  std::vector<float> v;
  for (int k = -7; k <= 7; ++k) v.push_back(0.25f * float(k));
  v.push_back(0.0f);  // 16 elements: one block of 16
  for (int i = 0; i < 16; ++i) v.push_back(0.0f);
  const Tensor x = Tensor::from_vector(v, {32});
  for (int bits : {8, 4}) {
    const RoundTrip r = round_trip(x, bits, 16);
    if (bits == 4) BOOST_TEST(max_abs_diff(r.back, x) == 0.0);
    BOOST_TEST(r.scales.to_vector<float>()[1] == 0.0f);
    for (size_t i = 16; i < 32; ++i) BOOST_TEST(r.back.to_vector<float>()[i] == 0.0f);
  }
  // int4 bytes: elements -7 (0x9) and -6 (0xA) pack as 0xA9, low nibble first.
  const RoundTrip r = round_trip(x, 4, 16);
  BOOST_TEST(int(uint8_t(r.q.data<int8_t>()[0])) == 0xA9);
}

BOOST_AUTO_TEST_CASE(one_huge_value_coarsens_only_its_block) {
  std::vector<float> v(128, 0.01f);
  v[5] = 1e6f;
  const RoundTrip r = round_trip(Tensor::from_vector(v, {128}), 8, 64);
  const std::vector<float> back = r.back.to_vector<float>();
  BOOST_TEST(std::fabs(back[5] - 1e6f) <= 1e6f / 127 / 2);
  BOOST_TEST(back[6] == 0.0f);  // 0.01 rounds to zero steps of 7874
  BOOST_TEST(std::fabs(back[100] - 0.01f) <= 0.01f / 127 / 2 * 1.0001f);
}

BOOST_AUTO_TEST_CASE(nan_and_infinity_poison_their_block) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> v(32, 1.0f);
    v[3] = bad;
    const RoundTrip r = round_trip(Tensor::from_vector(v, {32}), 8, 16);
    const std::vector<float> back = r.back.to_vector<float>();
    for (int i = 0; i < 16; ++i) BOOST_TEST(std::isnan(back[size_t(i)]));
    for (int i = 16; i < 32; ++i) BOOST_TEST(back[size_t(i)] == 1.0f);
    BOOST_TEST(!ops::all_finite(r.back));
  }
}

BOOST_AUTO_TEST_CASE(dequantize_sum_adds_the_chunks) {
  const int64_t n = 75, k = 3, block = 16;
  const int64_t qb = quantized_bytes(n, 4), nb = quantized_blocks(n, block);
  Tensor q = Tensor::empty({k * qb}, DType::i8), s = Tensor::empty({k * nb}), expected = Tensor::zeros({n});
  for (int64_t c = 0; c < k; ++c) {
    const RoundTrip r = round_trip(random(n, 40 + uint64_t(c), 2.0), 4, block);
    ops::copy_(ops::narrow(q, 0, c * qb, qb), r.q);
    ops::copy_(ops::narrow(s, 0, c * nb, nb), r.scales);
    ops::add_(expected, r.back);
  }
  const Tensor out = Tensor::empty({n});
  dequantize_sum(q, s, 4, block, k, out);
  BOOST_TEST(max_abs_diff(out, expected) < 1e-6);
}

BOOST_AUTO_TEST_CASE(bf16_input_and_output) {
  const Tensor x = ops::to(random(100, 9, 1.0), DType::bf16);
  const RoundTrip r = round_trip(x, 8, 32);
  BOOST_TEST((r.back.dtype() == DType::bf16));
  BOOST_TEST(max_abs_diff(ops::to(r.back, DType::f32), ops::to(x, DType::f32)) <= 1.0 / 127 / 2 + 1.0 / 128);
}
