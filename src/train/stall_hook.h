// A test hook for the collective deadline (Note [Collective deadline],
// parallel/watchdog.h): with TRIAD_STALL="RANK:STEP:spin" or "RANK:STEP:stop" in the
// environment, world rank RANK, when training step STEP starts, spins forever (a rank that
// is alive but never reaches its next collective) or stops itself with SIGSTOP (a rank the
// operating system stopped). The other ranks then wait in their next collective until
// comm_timeout ends the job. Unset: nothing happens.
#pragma once

#include <cstdint>

namespace triad::engine {

// Throws Error when TRIAD_STALL is set but malformed.
void stall_if_asked(int64_t step);

}  // namespace triad::engine
