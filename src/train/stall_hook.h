// A test hook for the collective deadline (Note [Collective deadline],
// parallel/watchdog.h) and for the jobs' tests: with TRIAD_STALL="RANK:STEP:spin",
// "RANK:STEP:stop" or "RANK:STEP:pause" in the environment, world rank RANK, when training
// step STEP starts, spins forever (a rank that is alive but never reaches its next
// collective), stops itself with SIGSTOP (a rank the operating system stopped), or sleeps
// kPauseSeconds once (a step that takes long: a job's test can cancel or signal it at a
// known step, whatever the machine's speed). The other ranks then wait in their next
// collective: until comm_timeout ends the job, or the pause does. Unset: nothing happens.
#pragma once

#include <cstdint>

namespace triad::engine {

inline constexpr int kPauseSeconds = 10;

// Throws Error when TRIAD_STALL is set but malformed.
void stall_if_asked(int64_t step);

}  // namespace triad::engine
