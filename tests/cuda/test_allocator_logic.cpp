// The bookkeeping of the stream-ordered caching allocator (Note [Stream-ordered caching
// allocator]) over a fake memory provider: fake addresses, a capacity to run out of, and
// events that complete when the test says their stream has caught up. Runs on the CPU.
#include <boost/test/unit_test.hpp>
#include <map>
#include <random>
#include <vector>

#include "cuda/caching_allocator.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_allocator_logic)

using namespace triad;
using namespace triad::cuda;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Memory from a pretend address space; events complete per stream on complete(stream).
class FakeMemory final : public MemoryProvider {
 public:
  explicit FakeMemory(size_t capacity) : capacity_(capacity) {}

  void* allocate(size_t nbytes) override {
    if (used_ + nbytes > capacity_) return nullptr;
    used_ += nbytes;
    const uintptr_t p = next_;
    next_ += (nbytes + MiB - 1) / MiB * MiB + MiB;  // a gap: segments are never adjacent
    live_[p] = nbytes;
    return reinterpret_cast<void*>(p);
  }
  void release(void* ptr, size_t nbytes) override {
    auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    BOOST_REQUIRE(it != live_.end());
    BOOST_REQUIRE_EQUAL(it->second, nbytes);
    used_ -= nbytes;
    live_.erase(it);
  }
  EventId record_event(StreamId stream) override {
    events_[++last_event_] = {stream, false};
    return last_event_;
  }
  bool event_done(EventId e) override { return events_.at(e).done; }
  void wait_event(EventId e) override {
    events_.at(e).done = true;
    ++host_waits;
  }
  void release_event(EventId e) override { BOOST_REQUIRE(events_.erase(e) == 1); }
  std::string where() const override { return "fake:0"; }

  // The stream has run everything queued so far: its events complete.
  void complete(StreamId stream) {
    for (auto& [_, e] : events_)
      if (e.stream == stream) e.done = true;
  }
  size_t used() const { return used_; }
  size_t live_events() const { return events_.size(); }
  int host_waits = 0;

 private:
  struct Event {
    StreamId stream;
    bool done;
  };
  size_t capacity_, used_ = 0;
  uintptr_t next_ = 0x100000000ull;
  std::map<uintptr_t, size_t> live_;
  std::map<EventId, Event> events_;
  EventId last_event_ = 0;
};

struct Fixture {
  explicit Fixture(size_t capacity = size_t(1) << 40) {
    auto m = std::make_unique<FakeMemory>(capacity);
    mem = m.get();
    alloc = std::make_unique<CachingAllocator>(std::move(m));
  }
  FakeMemory* mem;
  std::unique_ptr<CachingAllocator> alloc;
};

constexpr StreamId s1 = 0x1000, s2 = 0x2000;

char* as_char(void* p) { return static_cast<char*>(p); }
// Addresses as numbers: Boost.Test would print a char* as a string.
uintptr_t addr(void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

BOOST_AUTO_TEST_CASE(rounding_and_segment_sizes) {
  BOOST_TEST(CachingAllocator::round_size(1) == 512u);
  BOOST_TEST(CachingAllocator::round_size(512) == 512u);
  BOOST_TEST(CachingAllocator::round_size(513) == 1024u);
  BOOST_TEST(CachingAllocator::segment_size(512) == 2 * MiB);
  BOOST_TEST(CachingAllocator::segment_size(1 * MiB) == 2 * MiB);  // the small pool's largest
  BOOST_TEST(CachingAllocator::segment_size(1 * MiB + 512) == 20 * MiB);
  BOOST_TEST(CachingAllocator::segment_size(10 * MiB - 512) == 20 * MiB);
  BOOST_TEST(CachingAllocator::segment_size(10 * MiB) == 10 * MiB);
  BOOST_TEST(CachingAllocator::segment_size(11 * MiB + 1) == 12 * MiB);  // 2 MiB steps
}

BOOST_AUTO_TEST_CASE(zero_bytes_is_null) {
  Fixture f;
  BOOST_TEST(f.alloc->allocate(0, s1) == nullptr);
  f.alloc->deallocate(nullptr);
  BOOST_TEST(f.alloc->stats().allocations == 0u);
  BOOST_TEST(f.mem->used() == 0u);
}

BOOST_AUTO_TEST_CASE(freed_block_is_reused_without_the_provider) {
  Fixture f;
  void* p = f.alloc->allocate(1000, s1);
  f.alloc->deallocate(p);
  void* q = f.alloc->allocate(900, s1);
  BOOST_TEST(q == p);
  const MemoryStats s = f.alloc->stats();
  BOOST_TEST(s.allocations == 2u);
  BOOST_TEST(s.cache_hits == 1u);
  BOOST_TEST(s.provider_allocations == 1u);
  BOOST_TEST(f.mem->used() == 2 * MiB);
  f.alloc->deallocate(q);
}

BOOST_AUTO_TEST_CASE(small_segments_split_and_merge) {
  Fixture f;
  void* a = f.alloc->allocate(1000, s1);  // 1024 bytes at the start of a 2 MiB segment
  void* b = f.alloc->allocate(4096, s1);  // the next bytes of the same segment
  BOOST_TEST(addr(b) == addr(a) + 1024);
  BOOST_TEST(f.alloc->stats().provider_allocations == 1u);
  BOOST_TEST(f.alloc->stats().allocated_bytes == 1024u + 4096u);
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  // Both merged back: the whole small-pool maximum fits at the segment start again.
  void* c = f.alloc->allocate(1 * MiB, s1);
  BOOST_TEST(c == a);
  BOOST_TEST(f.alloc->stats().provider_allocations == 1u);
  f.alloc->deallocate(c);
}

BOOST_AUTO_TEST_CASE(large_segments_split_only_when_the_rest_is_large) {
  Fixture f;
  void* a = f.alloc->allocate(3 * MiB, s1);  // a 20 MiB segment, 17 MiB left over
  BOOST_TEST(f.alloc->stats().reserved_bytes == 20 * MiB);
  void* b = f.alloc->allocate(12 * MiB, s1);  // served from the 17 MiB rest
  BOOST_TEST(addr(b) == addr(a) + 3 * MiB);
  BOOST_TEST(f.alloc->stats().provider_allocations == 1u);
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  // 19.5 MiB rounds to a 20 MiB request; the cached 20 MiB block is used whole (the 0.5 MiB
  // rest is not worth a block of the large pool).
  void* c = f.alloc->allocate(19 * MiB + 512 * KiB, s1);
  BOOST_TEST(c == a);
  BOOST_TEST(f.alloc->stats().allocated_bytes == 20 * MiB);
  BOOST_TEST(f.alloc->stats().requested_bytes == 19 * MiB + 512 * KiB);
  f.alloc->deallocate(c);
}

BOOST_AUTO_TEST_CASE(small_and_large_pools_do_not_mix) {
  Fixture f;
  void* big = f.alloc->allocate(3 * MiB, s1);
  f.alloc->deallocate(big);
  void* small = f.alloc->allocate(1000, s1);  // not carved out of the cached 20 MiB block
  BOOST_TEST(f.alloc->stats().provider_allocations == 2u);
  BOOST_TEST(f.alloc->stats().reserved_bytes == 22 * MiB);
  f.alloc->deallocate(small);
}

BOOST_AUTO_TEST_CASE(blocks_are_cached_per_stream) {
  Fixture f;
  void* p = f.alloc->allocate(1000, s1);
  f.alloc->deallocate(p);
  void* q = f.alloc->allocate(1000, s2);  // s1's cache is not s2's
  BOOST_TEST(q != p);
  BOOST_TEST(f.alloc->stats().provider_allocations == 2u);
  void* r = f.alloc->allocate(1000, s1);
  BOOST_TEST(r == p);
  f.alloc->deallocate(q);
  f.alloc->deallocate(r);
}

BOOST_AUTO_TEST_CASE(use_on_another_stream_delays_reuse_until_its_event) {
  Fixture f;
  void* p = f.alloc->allocate(4096, s1);
  f.alloc->record_stream(p, s2);
  f.alloc->record_stream(p, s1);  // the allocation stream itself: nothing to record
  f.alloc->deallocate(p);
  BOOST_TEST(f.mem->live_events() == 1u);  // one event, on s2
  BOOST_TEST(f.alloc->stats().pending_free_bytes == 4096u);
  BOOST_TEST(f.alloc->stats().allocated_bytes == 0u);
  void* q = f.alloc->allocate(4096, s1);  // s2 may still read p: not handed out
  BOOST_TEST(q != p);
  f.mem->complete(s2);
  f.alloc->deallocate(q);
  void* r = f.alloc->allocate(4096, s1);  // the event is polled on this call
  BOOST_TEST(r == p);
  BOOST_TEST(f.alloc->stats().pending_free_bytes == 0u);
  BOOST_TEST(f.mem->live_events() == 0u);
  BOOST_TEST(f.mem->host_waits == 0);  // nothing ever waited on the host
  f.alloc->deallocate(r);
}

BOOST_AUTO_TEST_CASE(a_pending_block_does_not_merge) {
  Fixture f;
  void* a = f.alloc->allocate(1024, s1);
  void* b = f.alloc->allocate(1024, s1);
  f.alloc->record_stream(a, s2);
  f.alloc->deallocate(a);  // pending on s2
  f.alloc->deallocate(b);  // free, but its neighbour a is not
  void* c = f.alloc->allocate(2048, s1);
  BOOST_TEST(addr(c) != addr(a));
  f.mem->complete(s2);
  f.alloc->deallocate(c);
  void* d = f.alloc->allocate(1 * MiB, s1);  // everything merged once the event completed
  BOOST_TEST(d == a);
  f.alloc->deallocate(d);
}

BOOST_AUTO_TEST_CASE(stats_and_peaks) {
  Fixture f;
  void* a = f.alloc->allocate(3000, s1);  // 3072
  void* b = f.alloc->allocate(12 * MiB, s1);
  MemoryStats s = f.alloc->stats();
  BOOST_TEST(s.allocated_bytes == 3072 + 12 * MiB);
  BOOST_TEST(s.requested_bytes == 3000 + 12 * MiB);
  BOOST_TEST(s.reserved_bytes == 2 * MiB + 12 * MiB);
  f.alloc->deallocate(b);
  s = f.alloc->stats();
  BOOST_TEST(s.allocated_bytes == 3072u);
  BOOST_TEST(s.peak_allocated_bytes == 3072 + 12 * MiB);
  BOOST_TEST(s.reserved_bytes == 14 * MiB);  // cached, not returned
  f.alloc->reset_peak();
  BOOST_TEST(f.alloc->stats().peak_allocated_bytes == 3072u);
  BOOST_TEST(f.alloc->stats().peak_reserved_bytes == 14 * MiB);
  f.alloc->deallocate(a);
}

BOOST_AUTO_TEST_CASE(empty_cache_releases_free_segments_only) {
  Fixture f;
  void* keep = f.alloc->allocate(1000, s1);         // its 2 MiB segment stays
  void* drop = f.alloc->allocate(12 * MiB, s1);     // its segment goes
  void* pending = f.alloc->allocate(12 * MiB, s2);  // goes once its event is waited for
  f.alloc->record_stream(pending, s1);
  f.alloc->deallocate(drop);
  f.alloc->deallocate(pending);
  f.alloc->empty_cache();
  BOOST_TEST(f.mem->host_waits == 1);
  const MemoryStats s = f.alloc->stats();
  BOOST_TEST(s.reserved_bytes == 2 * MiB);
  BOOST_TEST(s.provider_releases == 2u);
  BOOST_TEST(f.mem->used() == 2 * MiB);
  f.alloc->deallocate(keep);
  f.alloc->empty_cache();
  BOOST_TEST(f.mem->used() == 0u);
  BOOST_TEST(f.alloc->stats().reserved_bytes == 0u);
}

BOOST_AUTO_TEST_CASE(out_of_memory_releases_the_cache_and_retries) {
  Fixture f(30 * MiB);
  void* a = f.alloc->allocate(20 * MiB, s1);
  f.alloc->deallocate(a);                     // cached on s1
  void* b = f.alloc->allocate(12 * MiB, s2);  // 20 + 12 > 30: the cache goes, then it fits
  BOOST_TEST(b != nullptr);
  BOOST_TEST(f.alloc->stats().retries_after_release == 1u);
  BOOST_TEST(f.alloc->stats().reserved_bytes == 12 * MiB);
  test::check_error([&] { f.alloc->allocate(20 * MiB, s2); }, {"out of memory on fake:0", "20971520 bytes"});
  f.alloc->deallocate(b);
}

BOOST_AUTO_TEST_CASE(foreign_pointers) {
  Fixture f;
  int x = 0;
  BOOST_CHECK_THROW(f.alloc->deallocate(&x), InternalError);  // a double free, or not ours
  BOOST_TEST(!f.alloc->record_stream(&x, s1));                // someone else's memory: ignored
  void* p = f.alloc->allocate(100, s1);
  BOOST_TEST(f.alloc->record_stream(p, s2));
  f.alloc->deallocate(p);
  BOOST_TEST(!f.alloc->record_stream(p, s2));  // freed
}

// Random allocations and frees on two streams, some used on the other stream: live blocks
// never overlap, the counters add up, and everything returns to the provider at the end.
BOOST_AUTO_TEST_CASE(random_workload_keeps_blocks_disjoint) {
  Fixture f;
  std::mt19937_64 rng(7);
  struct Live {
    char* p;
    size_t n;
  };
  std::vector<Live> live;
  size_t requested = 0;
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t n = rng() % 4 == 0 ? 1 + rng() % (24 * MiB) : 1 + rng() % (64 * KiB);
      const StreamId s = rng() % 2 ? s1 : s2;
      char* p = as_char(f.alloc->allocate(n, s));
      for (const Live& l : live) BOOST_REQUIRE(p + n <= l.p || l.p + l.n <= p);
      if (rng() % 5 == 0) f.alloc->record_stream(p, s == s1 ? s2 : s1);
      live.push_back({p, n});
      requested += n;
    } else {
      const size_t i = rng() % live.size();
      f.alloc->deallocate(live[i].p);
      requested -= live[i].n;
      live.erase(live.begin() + long(i));
    }
    if (step % 97 == 0) f.mem->complete(rng() % 2 ? s1 : s2);
    BOOST_REQUIRE_EQUAL(f.alloc->stats().requested_bytes, requested);
  }
  for (const Live& l : live) f.alloc->deallocate(l.p);
  f.alloc->empty_cache();
  const MemoryStats s = f.alloc->stats();
  BOOST_TEST(s.allocated_bytes == 0u);
  BOOST_TEST(s.reserved_bytes == 0u);
  BOOST_TEST(s.pending_free_bytes == 0u);
  BOOST_TEST(f.mem->used() == 0u);
  BOOST_TEST(f.mem->live_events() == 0u);
  BOOST_TEST(s.provider_allocations == s.provider_releases);
  BOOST_TEST(s.cache_hits > s.allocations / 2);
}

// Note [Graph pools]: while s1 records, its requests come from segments of their own that
// neither s1 before or after the recording nor s2 ever receive, also once freed; blocks freed
// during the recording serve its later requests; release_pool hands the pool's segments,
// free blocks and blocks still in use alike, to s1's ordinary cache.
BOOST_AUTO_TEST_CASE(a_graph_pool_is_private_until_released) {
  Fixture f;
  void* before = f.alloc->allocate(1000, s1);
  f.alloc->deallocate(before);  // cached on s1
  const CachingAllocator::PoolId pool = f.alloc->begin_pool(s1);
  BOOST_TEST(pool % 2 == 1u);
  test::check_error([&] { f.alloc->begin_pool(s1); }, {"fake:0", "one graph pool at a time"});
  void* a = f.alloc->allocate(1000, s1);
  BOOST_TEST(addr(a) != addr(before));  // not s1's cached block
  void* other = f.alloc->allocate(1000, s2);  // s2 does not record: its own cache
  f.alloc->deallocate(a);
  void* b = f.alloc->allocate(1000, s1);  // reused inside the recording
  BOOST_TEST(addr(b) == addr(a));
  void* held = f.alloc->allocate(3000, s1);
  f.alloc->end_pool(s1);
  BOOST_TEST(f.alloc->stats().provider_allocations == 3u);  // s1's, the pool's, s2's segments

  f.alloc->deallocate(b);  // back into the pool: no one else receives it
  for (StreamId s : {s1, s2}) {
    void* p = f.alloc->allocate(1000, s);
    BOOST_TEST(addr(p) != addr(b));
    BOOST_TEST(addr(p) != addr(held));
    f.alloc->deallocate(p);
  }
  f.alloc->release_pool(pool, s1);
  f.alloc->deallocate(held);  // after the release: s1's now, its segment merged whole again
  // Three MiB on s1: two from s1's own segment, the third from the pool's, none from the
  // provider.
  std::vector<void*> mib;
  for (int i = 0; i < 3; ++i) mib.push_back(f.alloc->allocate(1 * MiB, s1));
  BOOST_TEST(addr(mib[2]) == addr(b));
  BOOST_TEST(f.alloc->stats().provider_allocations == 3u);
  for (void* p : mib) f.alloc->deallocate(p);
  f.alloc->deallocate(other);
  f.alloc->empty_cache();
  BOOST_TEST(f.mem->used() == 0u);
}

// Note [Graph pools]: a block of s1's cache allocated before the recording and freed during
// it (a graph's replays may still use it) is held by the pool: no request of the recording,
// of s1 or s2 after it receives it and no neighbour merges with it, until release_pool hands
// it back to s1, also one whose use on s2 has completed.
BOOST_AUTO_TEST_CASE(a_block_freed_while_its_stream_records_is_held_until_the_release) {
  Fixture f;
  void* old = f.alloc->allocate(1000, s1);
  void* neighbour = f.alloc->allocate(1000, s1);  // same small segment, right after it
  void* shared = f.alloc->allocate(2 * MiB, s1);
  f.alloc->record_stream(shared, s2);
  const CachingAllocator::PoolId pool = f.alloc->begin_pool(s1);
  f.alloc->deallocate(old);
  f.alloc->deallocate(shared);
  void* in_recording = f.alloc->allocate(1000, s1);
  BOOST_TEST(addr(in_recording) != addr(old));
  f.alloc->end_pool(s1);
  const size_t held = CachingAllocator::round_size(1000) + 2 * MiB;
  BOOST_TEST(f.alloc->stats().pending_free_bytes == held);
  f.alloc->deallocate(neighbour);  // free, but not merged with the held block before it
  for (StreamId s : {s1, s2}) {
    void* p = f.alloc->allocate(1000, s);
    BOOST_TEST(addr(p) != addr(old));
    void* q = f.alloc->allocate(2 * MiB, s);
    BOOST_TEST(addr(q) != addr(shared));
    f.alloc->deallocate(p), f.alloc->deallocate(q);
  }
  f.alloc->empty_cache();  // s2's event done: shared still held, and so are both segments
  BOOST_TEST(f.alloc->stats().pending_free_bytes == held);
  const size_t small = CachingAllocator::segment_size(CachingAllocator::round_size(1000));
  const size_t mid = CachingAllocator::segment_size(2 * MiB);
  BOOST_TEST(f.mem->used() == 2 * small + mid);  // old's and the pool's small segments, shared's
  f.alloc->release_pool(pool, s1);
  BOOST_TEST(f.alloc->stats().pending_free_bytes == 0u);
  f.alloc->deallocate(in_recording);
  f.alloc->empty_cache();  // every segment free again: old's merged whole with its neighbour
  BOOST_TEST(f.mem->used() == 0u);
}

// While a stream records, a request the provider cannot serve fails at once: no events are
// waited for and nothing is returned to the provider (CUDA forbids both during a capture).
BOOST_AUTO_TEST_CASE(a_recording_never_releases_the_cache) {
  Fixture f(30 * MiB);
  void* a = f.alloc->allocate(20 * MiB, s1);
  f.alloc->record_stream(a, s2);
  f.alloc->deallocate(a);  // pending on s2's event
  const CachingAllocator::PoolId pool = f.alloc->begin_pool(s1);
  test::check_error([&] { f.alloc->allocate(12 * MiB, s1); }, {"out of memory on fake:0", "recording a graph"});
  BOOST_TEST(f.mem->host_waits == 0);
  BOOST_TEST(f.alloc->stats().retries_after_release == 0u);
  BOOST_TEST(f.alloc->stats().pending_free_bytes == 20 * MiB);  // no event was queried
  f.alloc->end_pool(s1);
  f.alloc->release_pool(pool, s1);
  void* b = f.alloc->allocate(12 * MiB, s1);  // now the cache goes back, and it fits
  BOOST_TEST(b != nullptr);
  BOOST_TEST(f.alloc->stats().retries_after_release == 1u);
  f.alloc->deallocate(b);
}

// Note [Graph pools]: a pool's segment whose blocks were all freed (during the recording, or
// after it) is kept while the pool is held, whatever asks for the cache back: empty_cache(),
// or a request the provider cannot serve, which fails rather than free the graph's memory.
// After release_pool it goes back as any other.
BOOST_AUTO_TEST_CASE(a_held_pools_free_segments_stay_until_it_is_released) {
  Fixture f(30 * MiB);
  const CachingAllocator::PoolId pool = f.alloc->begin_pool(s1);
  void* a = f.alloc->allocate(20 * MiB, s1);
  f.alloc->end_pool(s1);
  f.alloc->deallocate(a);  // whole and free, in the pool
  f.alloc->empty_cache();
  BOOST_TEST(f.mem->used() == CachingAllocator::segment_size(20 * MiB));
  test::check_error([&] { f.alloc->allocate(12 * MiB, s2); }, {"out of memory on fake:0"});
  BOOST_TEST(f.mem->used() == CachingAllocator::segment_size(20 * MiB));
  f.alloc->release_pool(pool, s1);
  void* b = f.alloc->allocate(12 * MiB, s2);  // now the pool's segment goes back, and it fits
  BOOST_TEST(b != nullptr);
  BOOST_TEST(f.alloc->stats().retries_after_release >= 1u);
  f.alloc->deallocate(b);
  f.alloc->empty_cache();
  BOOST_TEST(f.mem->used() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_allocator_logic
