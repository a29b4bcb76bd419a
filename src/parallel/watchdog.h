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
//
// Calls that complete on a device (NCCL's) return to the host once enqueued, and the host
// never blocks inside them, so no wait holds the slot while a peer is missing: the device
// spins in the collective's kernel, and the host blocks later, in whatever synchronizes
// next. So each such call is registered as it is enqueued (watch_device_call), with a test
// of its completion and the abort of its communicator. The watchdog polls the calls in
// flight; one older than the timeout is reported as a wait is, its communicator is
// aborted (ncclCommAbort, so that its kernels return) and the job aborted. PyTorch's
// NCCL watchdog polls its works' end events the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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

// A call enqueued on a device, in flight until `done` says it completed. `done` and
// `abort` are called on the watchdog's thread: `done` must not block (an event query; an
// error counts as done, for the caller's next check to raise), and `abort` makes the
// group's pending operations return.
struct DeviceCall {
  std::shared_ptr<const WatchedGroup> group;
  const char* call = "";  // a literal
  uint64_t seq = 0;
  std::function<bool()> done;
  std::function<void()> abort;
};

// Registers `c` as enqueued now. The caller registers only while watching is on
// (comm_timeout() > 0); registering costs a lock and a push.
void watch_device_call(DeviceCall c);

// One look at the registered device calls, as the watchdog takes it a few times a second:
// drops those that completed and, when one has been in flight longer than `timeout`
// seconds, runs its abort and returns its report (the oldest one's); "" otherwise.
std::string poll_device_calls(double timeout);

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
