#include "estimate/pipeline_memory.h"

#include <algorithm>

#include "tensor/error.h"

namespace triad::estimate {

using parallel::PipeAction;
using parallel::PipeOp;

double peak_activation_bytes(const std::vector<PipeAction>& actions, const std::vector<ChunkBytes>& chunks) {
  double live = 0, peak = 0;
  for (const PipeAction& a : actions) {
    TRIAD_CHECK(a.chunk >= 0 && a.chunk < int(chunks.size()), "peak_activation_bytes: action "
                                                                  << to_string(a) << " names chunk " << a.chunk
                                                                  << " of " << chunks.size());
    const ChunkBytes& b = chunks[size_t(a.chunk)];
    switch (a.op) {
      case PipeOp::forward:
        live += b.saved;
        break;
      case PipeOp::backward:
        live -= b.saved;
        break;
      case PipeOp::backward_input:
        live += b.deferred - b.saved;
        break;
      case PipeOp::backward_weight:
        live -= b.deferred;
        break;
    }
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace triad::estimate
