// Pipeline schedules as action lists: each against its definition. Every (micro-batch,
// chunk) runs its forward once and its backward once (ZB-H1: input gradient, then weight
// gradient) on each stage, forward before backward; 1F1B and ZB-H1 keep at most p
// micro-batches in flight on a stage (activations held from F to the end of their
// backward), GPipe all m; spelled-out lists for small cases.
#define BOOST_TEST_MODULE pipeline_schedule
#include <boost/test/unit_test.hpp>
#include <map>

#include "parallel/pipeline_schedule.h"
#include "support/check.h"

using namespace triad;
using parallel::PipeAction;
using parallel::PipeOp;
using parallel::PipeSchedule;

namespace {

std::string listing(const std::vector<PipeAction>& actions) {
  std::string s;
  for (const PipeAction& a : actions) s += (s.empty() ? "" : " ") + parallel::to_string(a);
  return s;
}

// The most (micro-batch, chunk) pairs whose forward has run and whose backward (ZB-H1: its
// weight-gradient pass) has not.
int peak_in_flight(const std::vector<PipeAction>& actions) {
  int live = 0, peak = 0;
  for (const PipeAction& a : actions) {
    if (a.op == PipeOp::forward) peak = std::max(peak, ++live);
    if (a.op == PipeOp::backward || a.op == PipeOp::backward_weight) --live;
  }
  return peak;
}

void check_complete(const std::vector<PipeAction>& actions, int m, int v, bool split) {
  std::map<std::pair<int, int>, std::string> seen;  // (micro, chunk) -> ops so far
  for (const PipeAction& a : actions) {
    std::string& ops = seen[{a.micro, a.chunk}];
    const char op = a.op == PipeOp::forward ? 'F' : a.op == PipeOp::backward ? 'B' : a.op == PipeOp::backward_input ? 'I' : 'W';
    ops += op;
  }
  BOOST_TEST(seen.size() == size_t(m * v));
  for (const auto& [key, ops] : seen) BOOST_TEST(ops == (split ? "FIW" : "FB"), key.first << "." << key.second);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_schedule_runs_each_pass_once_in_order) {
  for (int p : {1, 2, 4})
    for (int m : {p, 2 * p, 4 * p, 8 * p}) {
      for (int r = 0; r < p; ++r) {
        check_complete(parallel::pipe_actions(PipeSchedule::gpipe, p, r, m), m, 1, false);
        check_complete(parallel::pipe_actions(PipeSchedule::one_f_one_b, p, r, m), m, 1, false);
        check_complete(parallel::pipe_actions(PipeSchedule::zb_h1, p, r, m), m, 1, true);
        check_complete(parallel::pipe_actions(PipeSchedule::interleaved, p, r, m, 2), m, 2, false);
        BOOST_TEST(peak_in_flight(parallel::pipe_actions(PipeSchedule::gpipe, p, r, m)) == m);
        BOOST_TEST(peak_in_flight(parallel::pipe_actions(PipeSchedule::one_f_one_b, p, r, m)) == p - r);
        BOOST_TEST(peak_in_flight(parallel::pipe_actions(PipeSchedule::zb_h1, p, r, m)) <= p);
      }
      BOOST_TEST(peak_in_flight(parallel::pipe_actions(PipeSchedule::zb_h1, p, 0, m)) == p);
    }
}

BOOST_AUTO_TEST_CASE(small_cases_spelled_out) {
  // 1F1B, p 4, m 8, stage 0: three warm-up forwards, five F/B pairs, three cool-down backwards.
  BOOST_TEST(listing(parallel::pipe_actions(PipeSchedule::one_f_one_b, 4, 0, 8)) ==
             "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 F6.0 B3.0 F7.0 B4.0 B5.0 B6.0 B7.0");
  // The last stage has no warm-up.
  BOOST_TEST(listing(parallel::pipe_actions(PipeSchedule::one_f_one_b, 4, 3, 4)) ==
             "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0");
  // ZB-H1, p 2, m 4: stage 0 runs each W right after its I; stage 1 keeps one pending and
  // runs it at the end.
  BOOST_TEST(listing(parallel::pipe_actions(PipeSchedule::zb_h1, 2, 0, 4)) ==
             "F0.0 F1.0 I0.0 W0.0 F2.0 I1.0 W1.0 F3.0 I2.0 W2.0 I3.0 W3.0");
  BOOST_TEST(listing(parallel::pipe_actions(PipeSchedule::zb_h1, 2, 1, 4)) ==
             "F0.0 I0.0 F1.0 I1.0 W0.0 F2.0 I2.0 W1.0 F3.0 I3.0 W2.0 W3.0");
  // Interleaved, p 2, v 2, m 4, stage 1: (2 − 1 − 1)·2 + (2 − 1)·2 = 2 warm-up forwards;
  // groups of 2 micro-batches per chunk, backwards from the last chunk.
  BOOST_TEST(listing(parallel::pipe_actions(PipeSchedule::interleaved, 2, 1, 4, 2)) ==
             "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  BOOST_TEST(listing(parallel::pipe_actions(PipeSchedule::gpipe, 2, 0, 2)) == "F0.0 F1.0 B0.0 B1.0");
}

BOOST_AUTO_TEST_CASE(bad_schedules_name_the_keys) {
  test::check_error([] { parallel::parse_pipe_schedule("zb_v"); }, {"pipeline.schedule", "\"zb_v\""});
  test::check_error([] { parallel::pipe_actions(PipeSchedule::interleaved, 4, 0, 6, 2); },
                    {"gradient_accumulation_steps", "(micro-batches, 6)", "pipeline.stages (4)"});
  test::check_error([] { parallel::pipe_actions(PipeSchedule::one_f_one_b, 2, 0, 4, 2); }, {"pipeline.virtual_stages"});
}
