// Index checks inside kernels (Note [Deferred device errors], cuda/deferred_errors.h).
// Included only by the backend's .cu files.
#pragma once

#include <cstdint>

#include "cuda/deferred_errors.h"

namespace triad::cuda {

// True when value is in [0, limit). Otherwise the first thread on the device to find a bad
// index since the last report records it, and the caller must skip the index.
__device__ inline bool index_in_range(BadIndexSink sink, IndexOp op, int64_t value, int64_t position, int64_t count,
                                      int64_t limit) {
  if (value >= 0 && value < limit) return true;
  if (atomicCAS(sink.claimed, 0u, 1u) == 0u) {
    BadIndexRecord* r = sink.record;
    r->value = value;
    r->position = position;
    r->count = count;
    r->limit = limit;
    r->op = int(op);
    __threadfence_system();  // the fields reach host memory before `found`
    r->found = 1;
  }
  return false;
}

}  // namespace triad::cuda
