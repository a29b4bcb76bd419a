// Note [Stream-ordered caching allocator] (caching_allocator.h). Blocks of a segment form a
// doubly linked list in address order; free blocks are also in their pool's set, ordered by
// (stream, size, address) so the best fit on a stream is one lower_bound away.
#include "cuda/caching_allocator.h"

#include <algorithm>
#include <sstream>

#include "tensor/error.h"

namespace triad::cuda {

struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamId stream = 0;
  FreeSet* pool = nullptr;
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  bool allocated = false;
  size_t requested = 0;        // the caller's size while allocated
  int pending_events = 0;      // events still to complete before the block is free
  std::vector<StreamId> uses;  // other streams that used the block (record_stream)
};

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

namespace {

std::string mib(size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << double(bytes) / double(1u << 20) << " MiB";
  return os.str();
}

}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<MemoryProvider> provider) : provider_(std::move(provider)) {}

CachingAllocator::~CachingAllocator() {
  for (const PendingEvent& p : pending_) provider_->release_event(p.event);
  for (Block* head : segments_) {
    void* base = head->ptr;
    size_t total = 0;
    for (Block* b = head; b;) {
      Block* next = b->next;
      total += b->size;
      delete b;
      b = next;
    }
    provider_->release(base, total);
  }
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes < kRound) return kRound;
  return (nbytes + kRound - 1) / kRound * kRound;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kLargeRequest) return kMidSegment;
  return (rounded + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
}

StreamId CachingAllocator::serving(StreamId stream) const {
  const auto it = recording_.find(stream);
  return it == recording_.end() ? stream : it->second;
}

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  const bool recording = !recording_.empty();  // Note [Graph pools]: no event queries, no releases
  if (!recording) process_events();
  const size_t rounded = round_size(nbytes);
  const StreamId key = serving(stream);
  ++stats_.allocations;
  if (Block* b = find_free(rounded, key)) {
    ++stats_.cache_hits;
    return hand_out(b, rounded, nbytes);
  }
  Block* b = new_segment(rounded, key);
  if (!b && !recording) {
    // Give the cache back to the provider (other streams' blocks included) and try again.
    wait_all_events();
    release_free_segments();
    b = new_segment(rounded, key);
    if (b) ++stats_.retries_after_release;
  }
  if (!b) {
    std::ostringstream os;
    os << "out of memory on " << provider_->where() << ": allocating " << nbytes << " bytes (" << mib(nbytes)
       << ") failed; triad's caching allocator holds " << mib(stats_.allocated_bytes) << " in use and "
       << mib(stats_.reserved_bytes) << " reserved in total" << (recording ? " (while recording a graph)" : "");
    throw Error(os.str());
  }
  return hand_out(b, rounded, nbytes);
}

CachingAllocator::Block* CachingAllocator::find_free(size_t rounded, StreamId stream) {
  FreeSet& pool = pool_for(rounded);
  Block key;
  key.stream = stream;
  key.size = rounded;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t rounded, StreamId stream) {
  const size_t size = segment_size(rounded);
  void* p = provider_->allocate(size);
  if (!p) return nullptr;
  ++stats_.provider_allocations;
  stats_.reserved_bytes += size;
  auto* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = size;
  b->stream = stream;
  b->pool = &pool_for(rounded);
  segments_.push_back(b);
  update_peaks();
  return b;
}

// b is out of every free set; split off the rest when it is worth keeping.
void* CachingAllocator::hand_out(Block* b, size_t rounded, size_t requested) {
  const size_t rest = b->size - rounded;
  const bool split = b->pool == &small_ ? rest >= kRound : rest > kSmallRequest;
  if (split) {
    auto* r = new Block;
    r->ptr = b->ptr + rounded;
    r->size = rest;
    r->stream = b->stream;
    r->pool = b->pool;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    r->pool->insert(r);
  }
  b->allocated = true;
  b->requested = requested;
  in_use_.emplace(b->ptr, b);
  stats_.allocated_bytes += b->size;
  stats_.requested_bytes += requested;
  update_peaks();
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  TRIAD_ASSERT_MSG(it != in_use_.end(), "deallocate of " << ptr << ", which " << provider_->where()
                                                         << "'s caching allocator did not hand out");
  Block* b = it->second;
  in_use_.erase(it);
  b->allocated = false;
  stats_.allocated_bytes -= b->size;
  stats_.requested_bytes -= b->requested;
  b->requested = 0;
  // Note [Graph pools]: allocated before a recording of its stream, maybe used by it: the
  // pool holds it (as a pending event would: no neighbour merges with it) until release_pool.
  const auto recording = recording_.find(b->stream);
  const bool held = recording != recording_.end();
  if (held) held_[recording->second].push_back(b), ++b->pending_events;
  if (b->uses.empty() && !held) {
    free_block(b);
    return;
  }
  for (StreamId s : b->uses) pending_.push_back({provider_->record_event(s), b});
  b->pending_events += int(b->uses.size());
  b->uses.clear();
  stats_.pending_free_bytes += b->size;
}

bool CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) return false;
  Block* b = it->second;
  const auto pool = pools_.find(b->stream);  // a pool's block belongs to the pool's stream
  const StreamId owner = pool == pools_.end() ? b->stream : pool->second;
  if (stream != owner && std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end())
    b->uses.push_back(stream);
  return true;
}

CachingAllocator::PoolId CachingAllocator::begin_pool(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  TRIAD_CHECK(!recording_.count(stream), provider_->where() << ": a stream records into one graph pool at a time");
  const PoolId pool = next_pool_;
  next_pool_ += 2;
  recording_.emplace(stream, pool);
  pools_.emplace(pool, stream);
  return pool;
}

void CachingAllocator::end_pool(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_.erase(stream);
}

void CachingAllocator::release_pool(PoolId pool, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  TRIAD_ASSERT_MSG(pools_.erase(pool) == 1, "release_pool of pool " << pool << ", which is not held");
  for (Block* head : segments_) {
    if (head->stream != pool) continue;
    for (Block* b = head; b; b = b->next) {
      const bool cached = !b->allocated && b->pending_events == 0;  // in its free set, keyed by the pool
      if (cached) b->pool->erase(b);
      b->stream = stream;
      if (cached) b->pool->insert(b);
    }
  }
  if (const auto held = held_.find(pool); held != held_.end()) {
    for (Block* b : held->second)
      if (--b->pending_events == 0) {
        stats_.pending_free_bytes -= b->size;
        free_block(b);
      }
    held_.erase(held);
  }
}

// Back into its pool, merged with free neighbours (free: in a set, not waiting on events).
void CachingAllocator::free_block(Block* b) {
  auto is_free = [](const Block* n) { return n && !n->allocated && n->pending_events == 0; };
  if (is_free(b->prev)) {
    Block* p = b->prev;
    p->pool->erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (is_free(b->next)) {
    Block* n = b->next;
    n->pool->erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  b->pool->insert(b);
}

void CachingAllocator::process_events() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!provider_->event_done(it->event)) {
      ++it;
      continue;
    }
    provider_->release_event(it->event);
    Block* b = it->block;
    it = pending_.erase(it);
    if (--b->pending_events == 0) {
      stats_.pending_free_bytes -= b->size;
      free_block(b);
    }
  }
}

void CachingAllocator::wait_all_events() {
  for (const PendingEvent& p : pending_) provider_->wait_event(p.event);
  process_events();
}

void CachingAllocator::release_free_segments() {
  for (FreeSet* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      // A graph pool's segment stays until release_pool, even whole and free: the graph's
      // replays still use its memory (Note [Graph pools]).
      if (b->prev || b->next || pools_.count(b->stream)) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      provider_->release(b->ptr, b->size);
      ++stats_.provider_releases;
      stats_.reserved_bytes -= b->size;
      segments_.erase(std::find(segments_.begin(), segments_.end(), b));
      delete b;
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  wait_all_events();
  release_free_segments();
}

void CachingAllocator::update_peaks() {
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace triad::cuda
