#include "parallel/watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <thread>

#include "parallel/runtime.h"

namespace triad::parallel {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The wait in progress (MPI calls come from one thread: runtime.h). Written by the waiting
// thread, read by the watchdog's: since last, with release and acquire, so that a reader
// that sees since sees the fields of that wait; the reader checks since again after
// reading them, and drops what it read if the wait ended meanwhile.
struct Slot {
  std::atomic<const WatchedGroup*> group{nullptr};
  std::atomic<const char*> call{nullptr};
  std::atomic<uint64_t> seq{0};
  std::atomic<int> peer{-1};
  std::atomic<int64_t> since{0};  // steady clock, ns; 0: no wait
};
Slot g_slot;
std::atomic<double> g_timeout{0.0};
thread_local int t_depth = 0;       // watched waits nested on this thread (a staged call's inner one)
thread_local int64_t t_waited = 0;  // ns this thread spent in its outermost watched waits

// `state`: "has waited" (a host wait) or "has been in flight on the device".
std::string report(const WatchedGroup& group, const char* call, uint64_t seq, int peer, const char* state,
                   double waited, double timeout) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "rank " << world_rank() << ": error: [comm_timeout] " << call << " #"
     << seq << " on the " << group.axis << " group " << state << " " << waited << " s (comm_timeout " << timeout
     << " s). The group: "
     << group.world_ranks.size() << " ranks, world ranks";
  for (int r : group.world_ranks) os << " " << r;
  os << "; this is its rank " << group.rank << ".";
  if (peer >= 0 && size_t(peer) < group.world_ranks.size())
    os << " It waits for the message of its rank " << peer << " (world rank " << group.world_ranks[size_t(peer)]
       << ").";
  os << " A rank of the group is stuck or dead; aborting the job.\n";
  return os.str();
}

// Device calls registered since the last poll, and the poll's own list of those in
// flight (oldest first), which only the polling thread touches.
struct InFlight {
  DeviceCall c;
  int64_t since;
};
std::mutex g_enqueued_mutex;
std::vector<InFlight> g_enqueued;
std::mutex g_poll_mutex;
std::vector<InFlight> g_in_flight;

void watch() {
  for (;;) {
    const double timeout = g_timeout.load(std::memory_order_relaxed);
    const double tick = timeout > 0 ? std::clamp(timeout / 20, 0.01, 0.5) : 0.5;
    std::this_thread::sleep_for(std::chrono::duration<double>(tick));
    if (timeout <= 0) continue;
    if (const std::string overdue = poll_device_calls(timeout); !overdue.empty()) {
      std::fputs(overdue.c_str(), stderr);
      abort_job(1);
    }
    const int64_t since = g_slot.since.load(std::memory_order_acquire);
    if (since == 0) continue;
    const double waited = double(now_ns() - since) * 1e-9;
    if (waited < timeout) continue;
    const WatchedGroup* group = g_slot.group.load(std::memory_order_relaxed);
    const char* call = g_slot.call.load(std::memory_order_relaxed);
    const uint64_t seq = g_slot.seq.load(std::memory_order_relaxed);
    const int peer = g_slot.peer.load(std::memory_order_relaxed);
    if (g_slot.since.load(std::memory_order_acquire) != since) continue;  // it ended meanwhile
    std::fputs(report(*group, call, seq, peer, "has waited", waited, timeout).c_str(), stderr);
    abort_job(1);
  }
}

// A wait's work, watched while it blocks.
class WatchedWork final : public Work {
 public:
  WatchedWork(WorkPtr inner, const WatchedGroup& group, const char* call, uint64_t seq)
      : inner_(std::move(inner)), group_(group), call_(call), seq_(seq) {}
  void wait() override {
    WaitWatch watch(group_, call_, seq_);
    inner_->wait();
  }
  bool test() override { return inner_->test(); }

 private:
  WorkPtr inner_;
  const WatchedGroup& group_;
  const char* call_;
  uint64_t seq_;
};

}  // namespace

void set_comm_timeout(double seconds) {
  TRIAD_CHECK(seconds >= 0, "[config] comm_timeout must be >= 0 seconds (0: no deadline), got " << seconds);
  g_timeout.store(seconds);
  static std::once_flag started;
  if (seconds > 0) std::call_once(started, [] { std::thread(watch).detach(); });
}

double comm_timeout() { return g_timeout.load(std::memory_order_relaxed); }

WorkPtr watched(WorkPtr inner, const WatchedGroup& group, const char* call, uint64_t seq) {
  if (comm_timeout() <= 0) return inner;
  return std::make_unique<WatchedWork>(std::move(inner), group, call, seq);
}

void watch_device_call(DeviceCall c) {
  const int64_t since = now_ns();
  const std::lock_guard<std::mutex> lock(g_enqueued_mutex);
  g_enqueued.push_back({std::move(c), since});
}

std::string poll_device_calls(double timeout) {
  const std::lock_guard<std::mutex> poll(g_poll_mutex);
  {
    const std::lock_guard<std::mutex> lock(g_enqueued_mutex);
    for (InFlight& f : g_enqueued) g_in_flight.push_back(std::move(f));
    g_enqueued.clear();
  }
  std::erase_if(g_in_flight, [](const InFlight& f) { return f.c.done(); });
  if (g_in_flight.empty()) return "";
  const InFlight& oldest = g_in_flight.front();
  const double waited = double(now_ns() - oldest.since) * 1e-9;
  if (waited < timeout) return "";
  oldest.c.abort();
  return report(*oldest.c.group, oldest.c.call, oldest.c.seq, -1, "has been in flight on the device", waited,
                timeout);
}

void awaiting_peer(int group_rank) {
  if (t_depth > 0) g_slot.peer.store(group_rank, std::memory_order_relaxed);
}

double waited_seconds() { return double(t_waited) * 1e-9; }

WaitWatch::WaitWatch(const WatchedGroup& group, const char* call, uint64_t seq) : counted_(comm_timeout() > 0) {
  if (!counted_) return;
  outer_ = t_depth++ == 0;
  if (!outer_) return;  // the outer wait stays the one reported
  g_slot.group.store(&group, std::memory_order_relaxed);
  g_slot.call.store(call, std::memory_order_relaxed);
  g_slot.seq.store(seq, std::memory_order_relaxed);
  g_slot.peer.store(-1, std::memory_order_relaxed);
  g_slot.since.store(now_ns(), std::memory_order_release);
}

WaitWatch::~WaitWatch() {
  if (!counted_) return;
  --t_depth;
  if (!outer_) return;
  t_waited += now_ns() - g_slot.since.load(std::memory_order_relaxed);
  g_slot.since.store(0, std::memory_order_release);
}

}  // namespace triad::parallel
