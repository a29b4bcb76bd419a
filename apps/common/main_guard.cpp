#include "common/main_guard.h"

#include <cstdio>
#include <exception>

#include "parallel/runtime.h"

namespace triad::app {

namespace {

[[noreturn]] void fail_job(const char* message) {
  std::fprintf(stderr, "rank %d: error: %s\n", parallel::world_rank(), message);
  parallel::end_failing_rank(1);
}

}  // namespace

int guarded_main(const std::function<int()>& body) {
  try {
    const int status = body();
    if (parallel::initialized()) parallel::finalize();
    return status;
  } catch (const std::exception& e) {
    if (parallel::initialized()) fail_job(e.what());
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (...) {
    if (parallel::initialized()) fail_job("unknown exception (not a std::exception)");
    throw;  // single process: as before
  }
}

}  // namespace triad::app
