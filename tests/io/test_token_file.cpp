// Token files: round trips for uint16 and uint32 tokens, and every kind of damage (short
// header, truncation, trailing bytes, bad magic/version/dtype, flipped data byte, token out of
// the vocabulary) caught on open with an Error naming the file.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/token_file.h"
#include "support/check.h"
#include "support/files.h"
#include "tensor/error.h"

BOOST_AUTO_TEST_SUITE(test_token_file)

using namespace triad;
using io::TokenFile;
using test::check_error;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;
namespace fs = std::filesystem;

namespace {

std::vector<uint32_t> random_tokens(size_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = uint32_t(rng() % vocab);
  if (n > 0) t[n / 2] = vocab - 1;  // the largest id is in range
  return t;
}

void check_round_trip(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab,
                      int bytes_per_token) {
  io::write_token_file(path, tokens, vocab);
  BOOST_TEST(fs::file_size(path) == TokenFile::kHeaderBytes + tokens.size() * size_t(bytes_per_token));
  const TokenFile f = TokenFile::open(path);
  BOOST_TEST(f.size() == int64_t(tokens.size()));
  BOOST_TEST(f.vocab_size() == vocab);
  BOOST_TEST(f.bytes_per_token() == bytes_per_token);
  BOOST_TEST(f.path() == path);
  for (size_t i = 0; i < tokens.size(); ++i) BOOST_REQUIRE(f.at(int64_t(i)) == tokens[i]);
  std::vector<int64_t> all(tokens.size());
  f.read(0, f.size(), all.data());
  BOOST_CHECK(std::equal(all.begin(), all.end(), tokens.begin()));
  if (tokens.size() > 20) {
    std::vector<int64_t> part(7);
    f.read(13, 7, part.data());
    for (int i = 0; i < 7; ++i) BOOST_TEST(part[size_t(i)] == int64_t(tokens[size_t(13 + i)]));
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_uint16) {
  TempDir dir;
  check_round_trip(dir.file("a.bin"), random_tokens(100000, 4096, 1), 4096, 2);
  check_round_trip(dir.file("b.bin"), random_tokens(1000, 65536, 2), 65536, 2);  // the largest uint16 vocabulary
  check_round_trip(dir.file("empty.bin"), {}, 50257, 2);
  BOOST_TEST(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 3);  // no temporaries
}

BOOST_AUTO_TEST_CASE(round_trip_uint32) {
  TempDir dir;
  check_round_trip(dir.file("a.bin"), random_tokens(50000, 65537, 3), 65537, 4);
  check_round_trip(dir.file("b.bin"), random_tokens(1000, 4000000000u, 4), 4000000000u, 4);
}

BOOST_AUTO_TEST_CASE(header_layout) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  io::write_token_file(path, {1, 2, 3}, 10);
  const std::string b = read_bytes(path);
  BOOST_REQUIRE(b.size() == 36u + 6u);
  BOOST_TEST(b.substr(0, 8) == "TRIADTOK");
  uint32_t version, dtype, vocab;
  uint64_t count, checksum;
  std::memcpy(&version, b.data() + 8, 4);
  std::memcpy(&dtype, b.data() + 12, 4);
  std::memcpy(&vocab, b.data() + 16, 4);
  std::memcpy(&count, b.data() + 20, 8);
  std::memcpy(&checksum, b.data() + 28, 8);
  BOOST_TEST(version == 1u);
  BOOST_TEST(dtype == 2u);
  BOOST_TEST(vocab == 10u);
  BOOST_TEST(count == 3u);
  BOOST_TEST(checksum == io::fnv1a64(b.data() + 36, 6));
  BOOST_TEST(io::fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);  // the published FNV-1a 64 test vector
  BOOST_TEST(TokenFile::open(path).checksum() == checksum);
}

BOOST_AUTO_TEST_CASE(write_errors) {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  check_error([&] { io::write_token_file(path, {1, 2, 10}, 10); }, {path, "token 2", "vocab_size 10"});
  BOOST_TEST(!fs::exists(path));
  check_error([&] { io::write_token_file(path, {}, 0); }, {path, "vocab_size"});
  const std::string no_dir = dir.file("no/such/dir/t.bin");
  check_error([&] { io::write_token_file(no_dir, {1}, 10); }, {no_dir});
}

BOOST_AUTO_TEST_CASE(corrupt_files_name_the_file) {
  TempDir dir;
  const std::string good = dir.file("good.bin");
  io::write_token_file(good, random_tokens(1000, 300, 5), 300);
  const std::string bytes = read_bytes(good);
  const auto damaged = [&](const std::string& name, std::string b) {
    const std::string p = dir.file(name);
    write_bytes(p, b);
    return p;
  };
  const auto with_u32 = [&](size_t at, uint32_t v) {
    std::string b = bytes;
    std::memcpy(b.data() + at, &v, 4);
    return b;
  };

  const std::string missing = dir.file("missing.bin");
  check_error([&] { TokenFile::open(missing); }, {missing});
  check_error([&] { TokenFile::open(dir.path().string()); }, {dir.path().string(), "regular file"});

  std::string p = damaged("short.bin", bytes.substr(0, 20));
  check_error([&] { TokenFile::open(p); }, {p, "truncated"});
  p = damaged("truncated.bin", bytes.substr(0, bytes.size() - 1));
  check_error([&] { TokenFile::open(p); }, {p, "truncated"});
  p = damaged("trailing.bin", bytes + "xy");
  check_error([&] { TokenFile::open(p); }, {p, "2 bytes after"});

  std::string b = bytes;
  b[3] = 'X';
  p = damaged("magic.bin", b);
  check_error([&] { TokenFile::open(p); }, {p, "bad magic"});
  p = damaged("version.bin", with_u32(8, 2));
  check_error([&] { TokenFile::open(p); }, {p, "version 2"});
  p = damaged("dtype.bin", with_u32(12, 3));
  check_error([&] { TokenFile::open(p); }, {p, "dtype 3"});
  p = damaged("dtype4.bin", with_u32(12, 4));  // data size no longer matches the count
  check_error([&] { TokenFile::open(p); }, {p, "truncated"});

  b = bytes;
  b[TokenFile::kHeaderBytes + 777] ^= 0x01;
  p = damaged("flipped.bin", b);
  check_error([&] { TokenFile::open(p); }, {p, "checksum"});

  // A token outside the vocabulary, with a checksum that matches the damaged data.
  b = bytes;
  const uint16_t big = 300;
  std::memcpy(b.data() + TokenFile::kHeaderBytes + 2 * 123, &big, 2);
  const uint64_t sum = io::fnv1a64(b.data() + TokenFile::kHeaderBytes, b.size() - TokenFile::kHeaderBytes);
  std::memcpy(b.data() + 28, &sum, 8);
  p = damaged("range.bin", b);
  check_error([&] { TokenFile::open(p); }, {p, "token 123", "vocab_size 300"});

  // A smaller vocab_size in the header makes valid tokens out of range.
  p = damaged("vocab.bin", with_u32(16, 5));
  check_error([&] { TokenFile::open(p); }, {p, "not below vocab_size 5"});
  p = damaged("vocab0.bin", with_u32(16, 0));
  check_error([&] { TokenFile::open(p); }, {p, "vocab_size 0"});
}

BOOST_AUTO_TEST_CASE(reads_are_bounds_checked) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  io::write_token_file(path, {5, 6, 7, 8}, 10);
  const TokenFile f = TokenFile::open(path);
  std::vector<int64_t> out(8);
  f.read(4, 0, out.data());  // empty read at the end is fine
  f.read(1, 3, out.data());
  BOOST_TEST(out[0] == 6);
  BOOST_TEST(out[2] == 8);
  check_error([&] { f.read(2, 3, out.data()); }, {path, "[2, 5)"});
  check_error([&] { f.read(-1, 1, out.data()); }, {path});
  check_error([&] { f.read(0, -1, out.data()); }, {path});
  check_error([&] { f.at(4); }, {path});
  check_error([&] { f.at(-1); }, {path});
}

BOOST_AUTO_TEST_CASE(move_only) {
  static_assert(!std::is_copy_constructible_v<TokenFile>);
  static_assert(std::is_nothrow_move_constructible_v<TokenFile>);
  TempDir dir;
  io::write_token_file(dir.file("a.bin"), {1, 2, 3}, 4);
  io::write_token_file(dir.file("b.bin"), {9}, 100);
  TokenFile a = TokenFile::open(dir.file("a.bin"));
  TokenFile moved(std::move(a));
  BOOST_TEST(moved.size() == 3);
  BOOST_TEST(moved.at(2) == 3u);
  TokenFile b = TokenFile::open(dir.file("b.bin"));
  b = std::move(moved);
  BOOST_TEST(b.size() == 3);
  BOOST_TEST(b.at(0) == 1u);
  BOOST_TEST(b.vocab_size() == 4u);
}

BOOST_AUTO_TEST_CASE(overwrite_is_atomic_replace) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  io::write_token_file(path, {1, 2, 3}, 4);
  const TokenFile old_map = TokenFile::open(path);  // a reader keeps its mapping of the old file
  io::write_token_file(path, {7, 7}, 8);
  BOOST_TEST(old_map.size() == 3);
  BOOST_TEST(old_map.at(2) == 3u);
  const TokenFile f = TokenFile::open(path);
  BOOST_TEST(f.size() == 2);
  BOOST_TEST(f.at(1) == 7u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_token_file
