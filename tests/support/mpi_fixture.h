// A Boost.Test global fixture for multi-rank test programs: MPI starts before the first
// test case and is finalized after the last; support/mpi_program_fixture.cpp installs it in
// every multi-rank test program.
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
