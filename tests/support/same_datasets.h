// Whether two HDF5 files of triad (checkpoints or weights files) hold the same datasets, in
// the same order, bit for bit, with the same stored checksums, and b's data matches its
// checksums: a Boost.Test check of each.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <string>

#include "checkpoint/checkpoint.h"
#include "io/h5file.h"

namespace triad::test {

inline void check_same_datasets(const std::string& a, const std::string& b) {
  const engine::CheckpointSummary sa = engine::read_summary(a), sb = engine::read_summary(b);
  BOOST_TEST_REQUIRE(sa.kind == sb.kind);
  BOOST_TEST_REQUIRE(sa.datasets.size() == sb.datasets.size());
  const io::H5File fa = io::H5File::open(a), fb = io::H5File::open(b);
  for (size_t i = 0; i < sa.datasets.size(); ++i) {
    const auto &da = sa.datasets[i], &db = sb.datasets[i];
    BOOST_TEST_REQUIRE(da.name == db.name);
    BOOST_TEST((da.shape == db.shape && da.dtype == db.dtype), da.name);
    BOOST_TEST(da.stored_checksum == db.stored_checksum, da.name);
    const Tensor va = fa.read(da.name), vb = fb.read(db.name);
    BOOST_TEST(std::memcmp(va.raw_data(), vb.raw_data(), va.nbytes()) == 0, da.name << " of " << b);
  }
  BOOST_TEST(engine::failed_checksums(b).empty(), b);
}

}  // namespace triad::test
