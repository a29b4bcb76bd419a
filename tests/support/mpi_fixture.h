// A Boost.Test global fixture for multi-rank test programs: MPI starts before the first
// test case and is finalized after the last. Use BOOST_TEST_GLOBAL_FIXTURE(MpiFixture).
#pragma once

#include <boost/test/unit_test.hpp>

#include "parallel/runtime.h"

namespace triad::test {

struct MpiFixture {
  MpiFixture() {
    auto& suite = boost::unit_test::framework::master_test_suite();
    parallel::init(suite.argc, suite.argv);
  }
  ~MpiFixture() { parallel::finalize(); }
};

}  // namespace triad::test
