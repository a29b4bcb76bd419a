// Batch sampling: offsets are a pure function of (seed, step, row), stay inside the range,
// cover it evenly, agree across batch sizes (so data-parallel ranks can slice the global
// batch); make_batch shifts targets by one token; train/val split edges and errors.
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <limits>

#include "io/sampler.h"
#include "support/check.h"
#include "support/files.h"

BOOST_AUTO_TEST_SUITE(test_sampler)

using namespace triad;
using io::BatchSampler;
using io::TokenRange;
using test::check_error;
using test::TempDir;

BOOST_AUTO_TEST_CASE(offsets_are_a_function_of_seed_and_step) {
  const BatchSampler a({100, 100000}, 64, 1234), b({100, 100000}, 64, 1234), c({100, 100000}, 64, 999);
  for (int64_t step : {0, 1, 2, 1000, 123456789}) {
    BOOST_CHECK(a.offsets(step, 16) == b.offsets(step, 16));
    BOOST_CHECK(a.offsets(step, 16) == a.offsets(step, 16));
    BOOST_CHECK(a.offsets(step, 16) != c.offsets(step, 16));
  }
  BOOST_CHECK(a.offsets(0, 16) != a.offsets(1, 16));
  BOOST_CHECK(a.offsets(7, 16) != a.offsets(8, 16));
  // Row i does not depend on the batch size: a rank's slice of the global batch is the
  // same rows whatever the number of ranks.
  const auto global = a.offsets(5, 32);
  const auto first = a.offsets(5, 8);
  BOOST_CHECK(std::equal(first.begin(), first.end(), global.begin()));
  BOOST_TEST(a.offsets(3, 0).empty());
  // Rows are drawn independently (with replacement): a repeat among 32 of ~1e5 starts has
  // probability ~0.5%, so about 5 of 1000 batches hold one.
  int repeats = 0;
  for (int64_t step = 0; step < 1000; ++step) {
    auto rows = a.offsets(step, 32);
    std::sort(rows.begin(), rows.end());
    repeats += std::adjacent_find(rows.begin(), rows.end()) != rows.end();
  }
  BOOST_TEST(repeats < 20);
}

BOOST_AUTO_TEST_CASE(offsets_stay_in_range_and_cover_it) {
  // 10 valid starts: [50, 59] for range [50, 70) and seq_len 10.
  const BatchSampler s({50, 70}, 10, 42);
  std::vector<int64_t> histogram(10, 0);
  for (int64_t step = 0; step < 1000; ++step) {
    for (const int64_t o : s.offsets(step, 10)) {
      BOOST_REQUIRE(o >= 50);
      BOOST_REQUIRE(o <= 70 - 10 - 1);
      ++histogram[size_t(o - 50)];
    }
  }
  for (const int64_t h : histogram) BOOST_TEST((h > 850 && h < 1150));  // 1000 expected each
  // The shortest range has one start.
  const BatchSampler one({5, 16}, 10, 0);
  for (const int64_t o : one.offsets(3, 4)) BOOST_TEST(o == 5);
}

BOOST_AUTO_TEST_CASE(sampler_errors) {
  check_error([] { BatchSampler({0, 10}, 10, 0); }, {"[0, 10)", "seq_len + 1 = 11"});
  check_error([] { BatchSampler({0, 100}, 0, 0); }, {"seq_len"});
  check_error([] { BatchSampler({10, 5}, 2, 0); }, {"[10, 5)"});
  check_error([] { BatchSampler({-1, 100}, 2, 0); }, {"[-1, 100)"});
  const BatchSampler s({0, 100}, 8, 0);
  check_error([&] { s.offsets(-1, 4); }, {"step"});
  check_error([&] { s.offsets(0, -4); }, {"batch"});
}

BOOST_AUTO_TEST_CASE(make_batch_shifts_targets) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  std::vector<uint32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t((i * 7) % 500);
  io::write_token_file(path, tokens, 500);
  const io::TokenFile f = io::TokenFile::open(path);

  const int64_t T = 16;
  const BatchSampler s({0, f.size()}, T, 3);
  const auto offsets = s.offsets(11, 4);
  const io::Batch batch = io::make_batch(f, offsets, T);
  BOOST_CHECK(batch.inputs.dtype() == DType::i64);
  BOOST_CHECK(batch.targets.dtype() == DType::i64);
  BOOST_CHECK(batch.inputs.shape() == (Shape{4, T}));
  BOOST_CHECK(batch.targets.shape() == (Shape{4, T}));
  const auto x = batch.inputs.to_vector<int64_t>(), y = batch.targets.to_vector<int64_t>();
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      BOOST_REQUIRE(x[size_t(b * T + t)] == int64_t(tokens[size_t(offsets[size_t(b)] + t)]));
      BOOST_REQUIRE(y[size_t(b * T + t)] == int64_t(tokens[size_t(offsets[size_t(b)] + t + 1)]));
      if (t + 1 < T) BOOST_REQUIRE(y[size_t(b * T + t)] == x[size_t(b * T + t + 1)]);
    }
  }
  // The last valid start works; one further reads past the end of the file.
  io::make_batch(f, {f.size() - T - 1}, T);
  check_error([&] { io::make_batch(f, {f.size() - T}, T); }, {path});
  const io::Batch empty = io::make_batch(f, {}, T);
  BOOST_CHECK(empty.inputs.shape() == (Shape{0, T}));
}

BOOST_AUTO_TEST_CASE(split_train_val_edges) {
  auto [train, val] = io::split_train_val(1000, 0.1);
  BOOST_TEST(train.begin == 0);
  BOOST_TEST(train.end == 900);
  BOOST_TEST(val.begin == 900);
  BOOST_TEST(val.end == 1000);

  std::tie(train, val) = io::split_train_val(1000, 0.0);
  BOOST_TEST(train.size() == 1000);
  BOOST_TEST(val.size() == 0);
  BOOST_TEST(val.begin == 1000);

  std::tie(train, val) = io::split_train_val(1001, 0.5);
  BOOST_TEST(train.end == val.begin);
  BOOST_TEST(val.end == 1001);
  BOOST_TEST(std::abs(train.size() - val.size()) <= 1);

  std::tie(train, val) = io::split_train_val(0, 0.2);
  BOOST_TEST(train.size() == 0);
  BOOST_TEST(val.size() == 0);

  for (double bad : {-0.01, 0.51, 1.0, std::numeric_limits<double>::quiet_NaN()})
    check_error([&] { io::split_train_val(1000, bad); }, {"val_fraction"});
  check_error([] { io::split_train_val(-5, 0.1); }, {"n_tokens"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_sampler
