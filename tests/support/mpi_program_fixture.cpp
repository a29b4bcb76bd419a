// The multi-rank test programs' global fixture: MPI starts before the first test case and
// is finalized after the last (tests/CMakeLists.txt links this into every tests_*_mpi).
#include "support/mpi_fixture.h"

using triad::test::MpiFixture;
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);
