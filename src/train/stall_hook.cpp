#include "train/stall_hook.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "parallel/runtime.h"
#include "tensor/error.h"

namespace triad::engine {

void stall_if_asked(int64_t step) {
  const char* spec = std::getenv("TRIAD_STALL");
  if (spec == nullptr || *spec == '\0') return;
  std::istringstream in(spec);
  int rank = -1;
  int64_t at = -1;
  char c1 = 0, c2 = 0;
  std::string how;
  in >> rank >> c1 >> at >> c2 >> how;
  TRIAD_CHECK(in && !how.empty() && c1 == ':' && c2 == ':' && (how == "spin" || how == "stop" || how == "pause"),
              "TRIAD_STALL must be RANK:STEP:spin, RANK:STEP:stop or RANK:STEP:pause, got '" << spec << "'");
  if (rank != parallel::world_rank() || step != at) return;
  std::fprintf(stderr, "rank %d: TRIAD_STALL: %s at step %lld\n", rank, how.c_str(), static_cast<long long>(step));
  std::fflush(stderr);
  if (how == "stop") {
    std::raise(SIGSTOP);
    return;
  }
  if (how == "pause") {
    std::this_thread::sleep_for(std::chrono::seconds(kPauseSeconds));
    return;
  }
  for (volatile bool forever = true; forever;) {
  }
}

}  // namespace triad::engine
