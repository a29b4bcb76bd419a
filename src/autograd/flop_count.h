// Operation counts of forwards, for the FLOPs profiler (profiler/flops_profiler.h). While
// counting is on, the autograd functions add what each forward computes, by DeepSpeed's
// flops profiler's conventions:
//   matrix products (matmul, linear): MACs = m·n·k, flops = 2·MACs (+ the bias's m·n);
//   causal_attention: the two products of unfused attention in full (Q·Kᵀ and P·V, 2·B·H·T·T·d
//     MACs) and the softmax (B·H·T·T flops);
//   layer_norm: 5 flops per element (4 without weight); softmax, gelu and element-wise
//     add/sub/mul: 1 per output element.
// Counts are per process: the forward runs on one thread.
#pragma once

#include <cstdint>

namespace triad {

struct FlopCount {
  int64_t macs = 0;
  int64_t flops = 0;  // all floating-point operations, 2·MACs included
};

namespace flop_count {

// The running totals (read, and subtracted between two points, by the profiler).
FlopCount& totals();
bool& enabled();
inline void add(int64_t macs, int64_t flops) {
  if (!enabled()) return;
  totals().macs += macs, totals().flops += flops;
}

}  // namespace flop_count

}  // namespace triad
