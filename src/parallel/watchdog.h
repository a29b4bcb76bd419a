// Note [Collective deadline]: a rank that is alive but stuck (stopped, spinning, blocked
// on a file system) would hang every other rank of its groups forever in their waits. So
// every blocking wait of the MPI communicator (Work::wait, barrier) is watched: while the
// waiting thread is inside it, one slot holds what it waits for (the call, its group,
// the call's number on that group, the peer whose message it needs where the exchange
// knows it). A watchdog thread, started by set_comm_timeout, looks at the slot a few
// times a second; a wait older than the timeout is reported on stderr, naming all of it,
// and the job is aborted (runtime.h's abort_job: MPI_Abort), non-zero. PyTorch's NCCL
// watchdog and its collective timeout are the model.
//
// With the timeout off (0) nothing is watched and a wait costs what it did. On, a wait
// costs one allocation when its call starts and two clock reads and a few relaxed atomic
// stores when it blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace triad::parallel {

// The deadline of every watched wait in this process, in seconds; 0 turns watching off.
// The first value above 0 starts the watchdog thread. Set it before the calls it should
// cover: a call started with watching off stays unwatched.
void set_comm_timeout(double seconds);
double comm_timeout();

// What the messages say of a group: its axis in the process grid ("tp", "dp", ...) and,
// for each of its ranks, the world rank. A communicator owns one; it must outlive the
// waits on it.
struct WatchedGroup {
  std::string axis = "world";
  std::vector<int> world_ranks;
  int rank = 0;
};

// `inner`, watched: its wait() fills the slot while it blocks. Returns inner itself when
// watching is off. `call` is a literal; `seq` numbers the calls on the group from 1.
WorkPtr watched(WorkPtr inner, const WatchedGroup& group, const char* call, uint64_t seq);

// Inside a watched wait: the group rank whose message the wait needs now (-1: not known).
void awaiting_peer(int group_rank);

// Seconds this thread has spent in watched waits since it started (0 while watching is
// off): what a step spent waiting for other ranks, which the trainer subtracts from the
// step's time to tell a slow rank from one that waits for it (the straggler report).
double waited_seconds();

// The slot, held while a blocking call runs (what watched() works use; barrier uses it
// directly). Does nothing when watching is off.
class WaitWatch {
 public:
  WaitWatch(const WatchedGroup& group, const char* call, uint64_t seq);
  ~WaitWatch();
  WaitWatch(const WaitWatch&) = delete;
  WaitWatch& operator=(const WaitWatch&) = delete;

 private:
  bool counted_ = false;  // watching was on: this watch is in the thread's depth
  bool outer_ = false;    // the thread's outermost watch: it holds the slot
};

}  // namespace triad::parallel
