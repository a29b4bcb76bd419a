#include "common/main_guard.h"

#include <cstdio>
#include <exception>

namespace triad::app {

int guarded_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace triad::app
