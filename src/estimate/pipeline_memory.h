// Activation bytes one pipeline rank holds at the peak of a step, from its schedule's
// action list (parallel/pipeline_schedule.h) and what one micro-batch of each of its chunks
// keeps. peak_live_micro_batches counts (micro-batch, chunk) pairs; this weighs them, since
// chunks differ (the first holds the embedding, the last the head and its loss), and adds
// what ZB-H1's deferred weight-gradient passes keep, which the count leaves out.
//
// A pair's `saved` bytes live from its forward (F) to its backward (B) or input-gradient
// pass (I); from I to its weight-gradient pass (W) it holds `deferred` bytes instead (the
// inputs and output gradients of its linear layers, Note [Split backward]). Bytes are
// counted between actions: the transients inside one pass (its gradients, a recomputed
// segment) are not.
#pragma once

#include <vector>

#include "parallel/pipeline_schedule.h"

namespace triad::estimate {

struct ChunkBytes {
  double saved = 0;     // one micro-batch of the chunk, F to B or I
  double deferred = 0;  // one micro-batch of the chunk, I to W
};

// chunks[c] for chunk c of the rank; throws Error when an action names a chunk outside it.
double peak_activation_bytes(const std::vector<parallel::PipeAction>& actions, const std::vector<ChunkBytes>& chunks);

}  // namespace triad::estimate
