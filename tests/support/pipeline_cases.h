// The pipeline schedules, and the (stages, micro-batches, chunks) cases each is checked
// on, shared by the tests of the action lists (parallel/test_pipeline_schedule) and of
// their timing (estimate/test_pipeline_time).
#pragma once

#include <tuple>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace triad::test {

inline constexpr parallel::PipeSchedule kAllSchedules[] = {
    parallel::PipeSchedule::gpipe, parallel::PipeSchedule::one_f_one_b, parallel::PipeSchedule::interleaved,
    parallel::PipeSchedule::zb_h1};

// The (p, m, v) cases every schedule is checked on (interleaved needs m a multiple of p).
inline std::vector<std::tuple<int, int, int>> schedule_cases(parallel::PipeSchedule s) {
  std::vector<std::tuple<int, int, int>> out;
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 5, 8, 12, 16})
      for (int v : {1, 2, 3}) {
        if (s == parallel::PipeSchedule::interleaved ? m % p != 0 : v != 1) continue;
        out.push_back({p, m, v});
      }
  return out;
}

}  // namespace triad::test
