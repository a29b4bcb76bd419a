// CRC-32C against the published check value and RFC 3720's test vectors (B.4), and the
// mask TensorBoard event files store, computed by hand from its definition.
#define BOOST_TEST_MODULE crc32c
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <numeric>
#include <vector>

#include "io/crc32c.h"

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
