// The inputs and closed-form results of the collective tests (host, staged and device
// communicators alike): rank r's element j, and the reduction of ranks 0..n-1 of it. The
// values are small integers, so every dtype holds them and their reductions over n <= 8
// ranks exactly.
#pragma once

#include <algorithm>
#include <cstdint>

#include "parallel/communicator.h"

namespace triad::test {

inline double v_sum(int r, int64_t j) { return (r + 1) + (j % 7); }           // input of sum
inline double v_mm(int r, int64_t j) { return double((r * 3 + j) % 13) - 6; }  // input of max/min

inline double v_for(parallel::ReduceOp op, int r, int64_t j) {
  return op == parallel::ReduceOp::sum ? v_sum(r, j) : v_mm(r, j);
}

// The reduction of v_for(op, r, j) over r in [0, n).
inline double fold(parallel::ReduceOp op, int n, int64_t j) {
  double acc = op == parallel::ReduceOp::sum ? 0 : v_mm(0, j);
  for (int r = 0; r < n; ++r) {
    if (op == parallel::ReduceOp::sum) acc += v_sum(r, j);
    if (op == parallel::ReduceOp::max) acc = std::max(acc, v_mm(r, j));
    if (op == parallel::ReduceOp::min) acc = std::min(acc, v_mm(r, j));
  }
  return acc;
}

inline const char* name(parallel::ReduceOp op) {
  return op == parallel::ReduceOp::sum ? "sum" : op == parallel::ReduceOp::max ? "max" : "min";
}

}  // namespace triad::test
