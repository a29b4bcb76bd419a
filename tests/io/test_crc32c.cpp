// CRC-32C against the published check value and RFC 3720's test vectors (B.4), against its
// bit-by-bit definition at every length up to 100 bytes, at odd addresses and over 1 MB
// (whichever loop the CPU runs: 8 bytes at a time with SSE 4.2, else a table), and the
// mask TensorBoard event files store, computed by hand from its definition.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <numeric>
#include <vector>

#include "io/crc32c.h"

BOOST_AUTO_TEST_SUITE(test_crc32c)

using triad::io::crc32c;
using triad::io::masked_crc32c;

BOOST_AUTO_TEST_CASE(check_value) {
  const char* text = "123456789";
  BOOST_CHECK_EQUAL(crc32c(text, std::strlen(text)), 0xE3069283u);
  BOOST_CHECK_EQUAL(crc32c(text, 0), 0u);
}

BOOST_AUTO_TEST_CASE(rfc3720_vectors) {
  std::vector<unsigned char> bytes(32, 0);
  BOOST_CHECK_EQUAL(crc32c(bytes.data(), bytes.size()), 0x8A9136AAu);
  std::fill(bytes.begin(), bytes.end(), 0xFF);
  BOOST_CHECK_EQUAL(crc32c(bytes.data(), bytes.size()), 0x62A8AB43u);
  std::iota(bytes.begin(), bytes.end(), 0);
  BOOST_CHECK_EQUAL(crc32c(bytes.data(), bytes.size()), 0x46DD794Eu);
  std::iota(bytes.rbegin(), bytes.rend(), 0);
  BOOST_CHECK_EQUAL(crc32c(bytes.data(), bytes.size()), 0x113FDB5Cu);
}

BOOST_AUTO_TEST_CASE(mask_rotates_right_by_15_and_adds_the_constant) {
  // 0xE3069283 rotated right by 15 = 0x2507C60D; + 0xa282ead8 = 0xC78AB0E5.
  BOOST_CHECK_EQUAL(masked_crc32c("123456789", 9), 0xC78AB0E5u);
}

BOOST_AUTO_TEST_CASE(every_length_and_alignment_matches_the_definition) {
  const auto reference = [](const unsigned char* p, size_t n) {  // bit by bit, reflected 0x82F63B78
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      crc ^= p[i];
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (crc & 1 ? 0x82F63B78u : 0u);
    }
    return crc ^ 0xFFFFFFFFu;
  };
  std::vector<unsigned char> bytes((1 << 20) + 9);
  uint32_t x = 12345;
  for (unsigned char& b : bytes) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t offset : {0, 1, 3})
    for (size_t n = 0; n <= 100; ++n) BOOST_CHECK_EQUAL(crc32c(bytes.data() + offset, n), reference(bytes.data() + offset, n));
  BOOST_CHECK_EQUAL(crc32c(bytes.data() + 5, 1 << 20), reference(bytes.data() + 5, 1 << 20));
}

BOOST_AUTO_TEST_SUITE_END()  // test_crc32c
