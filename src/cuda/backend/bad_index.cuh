// Index checks inside kernels (Note [Deferred device errors], cuda/deferred_errors.h).
// Included only by the backend's .cu files.
#pragma once

#include <cstdint>

#include "cuda/deferred_errors.h"

namespace triad::cuda {

// Records a bad index (value outside [0, limit)) found by `op` at `position` of `count`
// indices, when it is the first on the device since the last report; the caller skips it.
__device__ inline void record_bad_index(BadIndexSink sink, IndexOp op, int64_t value, int64_t position, int64_t count,
                                        int64_t limit) {
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
}

}  // namespace triad::cuda
