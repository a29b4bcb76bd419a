// The bookkeeping of triad's stream-ordered caching allocator, as pure host logic: which
// cached block serves a request, how blocks split and merge, when a freed block may be
// reused, and what the allocator holds. The memory itself and the events come from a
// MemoryProvider: cudaMalloc/cudaFree and CUDA events for device memory
// (device_allocator.h), cudaHostAlloc for pinned staging buffers (pinned.h), and a fake in
// the unit tests, which is why this file knows nothing of CUDA.
//
// Note [Stream-ordered caching allocator]: a training step allocates and frees the same
// buffers every step, and cudaMalloc/cudaFree synchronize the device, so the allocator
// keeps what it gets from the driver and hands it out again (as PyTorch's
// CUDACachingAllocator does).
// - Sizes round up to 512 bytes. Requests up to 1 MiB come from 2 MiB segments (the small
//   pool); larger ones from 20 MiB segments below 10 MiB, else from a segment of their own
//   size rounded to 2 MiB (the large pool). A cached block larger than the request is
//   split when the rest is worth keeping (512 bytes in the small pool, over 1 MiB in the
//   large one); freed neighbours in a segment merge again.
// - Every segment belongs to the stream it was first allocated for, and its blocks are
//   handed out only to requests on that stream. Work on one stream runs in order, so a
//   block freed on the host while kernels that use it are still queued can be given to the
//   next request on the same stream at once: its new user's kernels queue behind the old.
// - A block used on another stream too (a collective on the communication stream, a copy
//   on a side stream) must be declared with record_stream(). When such a block is freed,
//   an event is recorded on each of those streams and the block stays out of the cache
//   until all of them have completed; the allocator polls them on its next call. So a
//   free never waits on the host, and no stream reuses memory another is still reading.
// - Nothing is returned to the driver during a step. empty_cache() releases every segment
//   with no block in use (after waiting for pending events), and an allocation the
//   provider cannot satisfy first does the same and retries.
//
// Note [Graph pools]: a CUDA graph replays its kernels on the addresses they had when it
// was recorded, so memory allocated while recording must stay the graph's as long as the
// graph may replay, whoever frees it on the host (as PyTorch's graph pools do). While a
// stream records (begin_pool .. end_pool), its requests are served from a private pool:
// segments of their own, keyed by the pool's id (odd, so never a stream's bits) where other
// blocks are keyed by their stream, so no other request ever receives them. Blocks freed
// during the recording are reused by later requests of the same recording, which the graph
// orders as the stream did; blocks freed after it go back to the pool, unused until
// release_pool, called once the graph is gone and its last replay enqueued on the stream,
// makes the pool's segments the stream's ordinary cache (its blocks still in use return
// there when freed). A block of the recording stream's ordinary cache, allocated before
// the recording and freed during it, may still be used by the graph's replays (a training
// step's work reads what the step before left, and drops it): it is held the pool's too,
// not reused until release_pool returns it. A held pool's segments stay with the provider
// even when all their blocks are free: empty_cache() and the release before a retry skip
// them. While any stream records, the allocator neither queries events nor returns memory
// to the provider (CUDA forbids both during a capture): a request it cannot serve from the
// pool or a new segment fails, and the recording with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace triad::cuda {

// A stream as the allocator sees it: an opaque identity (a cudaStream_t's bits).
using StreamId = uintptr_t;
using EventId = uintptr_t;

// What the caching allocator asks of the memory underneath it.
class MemoryProvider {
 public:
  virtual ~MemoryProvider() = default;
  // nbytes of fresh memory, or nullptr when there is not enough.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void release(void* ptr, size_t nbytes) = 0;
  // An event recorded now on `stream`: complete once the stream has run everything queued
  // on it before this call.
  virtual EventId record_event(StreamId stream) = 0;
  virtual bool event_done(EventId event) = 0;  // never blocks
  virtual void wait_event(EventId event) = 0;  // blocks the host until done
  virtual void release_event(EventId event) = 0;
  // For error messages: "cuda:0", "pinned host memory".
  virtual std::string where() const = 0;
};

// Byte counts and event counts of one caching allocator. "allocated" counts blocks in use
// (rounded sizes), "reserved" the segments held from the provider (in use or cached).
struct MemoryStats {
  size_t allocated_bytes = 0;
  size_t reserved_bytes = 0;
  size_t requested_bytes = 0;  // the callers' sizes, before rounding
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  size_t pending_free_bytes = 0;  // freed, waiting for other streams' events
  uint64_t allocations = 0;       // allocate() calls with nbytes > 0
  uint64_t cache_hits = 0;        // of those, served without asking the provider
  uint64_t provider_allocations = 0;
  uint64_t provider_releases = 0;
  uint64_t retries_after_release = 0;  // allocations that succeeded only after empty_cache
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;               // every size is a multiple of this
  static constexpr size_t kSmallRequest = 1u << 20;   // up to here: the small pool
  static constexpr size_t kSmallSegment = 2u << 20;   // segment size of the small pool
  static constexpr size_t kMidSegment = 20u << 20;    // segments for requests below kLargeRequest
  static constexpr size_t kLargeRequest = 10u << 20;  // from here: a segment of its own
  static constexpr size_t kLargeRounding = 2u << 20;  // which rounds to this

  explicit CachingAllocator(std::unique_ptr<MemoryProvider> provider);
  ~CachingAllocator();  // releases every segment (the provider's memory must outlive users)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes for work on `stream`; nullptr for 0 bytes. Throws Error when
  // the provider cannot supply it even after releasing the cache.
  void* allocate(size_t nbytes, StreamId stream);
  // Returns the block at ptr (from allocate) to the cache; see the Note for other streams.
  void deallocate(void* ptr);
  // The block at ptr (from allocate, not yet freed) is also used by work on `stream`.
  // Returns false, doing nothing, when ptr is not the start of a block in use here (memory
  // from elsewhere, whose owner keeps it alive).
  bool record_stream(void* ptr, StreamId stream);
  // Waits for pending frees and returns every segment without a block in use.
  void empty_cache();

  // Note [Graph pools]. PoolId: the key of a pool's blocks.
  using PoolId = StreamId;
  // Until end_pool(stream), requests on `stream` are served from a new private pool, whose id
  // is returned. Throws Error when `stream` records already.
  PoolId begin_pool(StreamId stream);
  void end_pool(StreamId stream);
  // The pool's segments become `stream`'s ordinary cache (the graph that used them is gone,
  // its last replay enqueued on `stream`).
  void release_pool(PoolId pool, StreamId stream);

  MemoryStats stats() const;
  void reset_peak();  // peaks restart from the current values

  // The rounded size a request of nbytes occupies, and the segment a miss would ask for.
  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

  MemoryProvider& provider() { return *provider_; }

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BlockOrder>;
  struct PendingEvent {
    EventId event;
    Block* block;
  };

  FreeSet& pool_for(size_t rounded) { return rounded <= kSmallRequest ? small_ : large_; }
  StreamId serving(StreamId stream) const;  // the key requests on stream take: its pool's while it records
  Block* find_free(size_t rounded, StreamId stream);
  Block* new_segment(size_t rounded, StreamId stream);
  void* hand_out(Block* block, size_t rounded, size_t requested);
  void free_block(Block* block);
  void process_events();
  void release_free_segments();
  void wait_all_events();
  void update_peaks();

  std::unique_ptr<MemoryProvider> provider_;
  mutable std::mutex mutex_;
  FreeSet small_, large_;
  std::unordered_map<void*, Block*> in_use_;
  std::deque<PendingEvent> pending_;
  std::vector<Block*> segments_;  // the first block of every segment held
  std::unordered_map<StreamId, PoolId> recording_;  // stream -> the pool it records into
  std::unordered_map<PoolId, StreamId> pools_;      // every pool not yet released -> its stream
  std::unordered_map<PoolId, std::vector<Block*>> held_;  // ordinary blocks freed while their stream recorded
  PoolId next_pool_ = 1;                            // odd: never a stream's (aligned) bits
  MemoryStats stats_;
};

}  // namespace triad::cuda
