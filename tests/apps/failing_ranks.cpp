// failing_ranks MODE: fails under mpirun the way triad's programs do (app::guarded_main), for
// check_failing_ranks.sh (Note [A failing rank's end] in parallel/runtime.h).
//   staggered  every rank throws, rank r after r x 300 ms: each must print its own error
//              before the job ends, the last 0.9 s after the first;
//   alone      rank 1 throws; the others wait for it in a barrier over the world, which it
//              never joins: the job must end anyway, with rank 1's error.
#include <chrono>
#include <string>
#include <thread>

#include "common/main_guard.h"
#include "parallel/runtime.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  return triad::app::guarded_main([&] {
    const triad::parallel::CommunicatorPtr world = triad::parallel::init(argc, argv);
    const std::string mode = argc > 1 ? argv[1] : "";
    TRIAD_CHECK(mode == "staggered" || mode == "alone", "failing_ranks: expected staggered or alone, got '" << mode << "'");
    if (mode == "staggered") {
      std::this_thread::sleep_for(std::chrono::milliseconds(300 * world->rank()));
      TRIAD_CHECK(false, "rank " << world->rank() << " failed");
    }
    TRIAD_CHECK(world->rank() != 1, "rank 1 failed alone");
    world->barrier();
    return 0;
  });
}
