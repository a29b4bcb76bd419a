// main() of the test programs (all but the GPU ones, which bring their own from
// cuda/gpu_test_main.h): compiled once and linked into each, so that no test source has to
// define BOOST_TEST_MODULE and every one can share the precompiled header precompiled.h. The
// master suite is named after the program, as BOOST_TEST_MODULE would name it.
#include <boost/test/unit_test.hpp>
#include <filesystem>

namespace {

bool name_master_suite() {
  auto& suite = boost::unit_test::framework::master_test_suite();
  if (suite.argc > 0) suite.p_name.value = std::filesystem::path(suite.argv[0]).filename().string();
  return true;
}

}  // namespace

int main(int argc, char* argv[]) { return boost::unit_test::unit_test_main(&name_master_suite, argc, argv); }
