// Pipeline schedules as action lists (Note [Pipeline schedules]), each against its
// definition: every (micro-batch, chunk) runs forward, then backward (ZB-H1: I, then W)
// exactly once on each rank; live activations stay within each schedule's bound; small
// lists are spelled out by hand from the definitions; bad arguments name the config keys.
// Their timing is estimate/test_pipeline_time's.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <map>

#include "parallel/pipeline_schedule.h"
#include "support/check.h"
#include "support/pipeline_cases.h"

BOOST_AUTO_TEST_SUITE(test_pipeline_schedule)

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

std::string listing(PipeSchedule s, int p, int r, int m, int v = 1) {
  return listing(parallel::pipe_actions(s, p, r, m, v));
}

// Each (micro, chunk) of m × v runs exactly F then B, or (split) F, I, W, on the rank.
void check_complete(const std::vector<PipeAction>& actions, int m, int v, bool split) {
  std::map<std::pair<int, int>, std::string> ops;
  for (const PipeAction& a : actions) ops[{a.micro, a.chunk}] += parallel::to_string(a).front();
  BOOST_TEST(ops.size() == size_t(m) * size_t(v));
  for (const auto& [key, seq] : ops) {
    BOOST_TEST((key.first >= 0 && key.first < m && key.second >= 0 && key.second < v));
    BOOST_TEST(seq == (split ? "FIW" : "FB"), "micro " << key.first << " chunk " << key.second);
  }
}

// Live until W as well (what the executor holds for ZB-H1: the W queue).
int peak_live_until_w(const std::vector<PipeAction>& actions) {
  int live = 0, peak = 0;
  for (const PipeAction& a : actions) {
    if (a.op == PipeOp::forward) peak = std::max(peak, ++live);
    if (a.op == PipeOp::backward || a.op == PipeOp::backward_weight) --live;
  }
  return peak;
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_round_trip) {
  for (PipeSchedule s : test::kAllSchedules)
    BOOST_TEST(int(parallel::parse_pipe_schedule(parallel::pipe_schedule_name(s))) == int(s));
  BOOST_TEST(parallel::pipe_schedule_name(PipeSchedule::one_f_one_b) == "1f1b");
  BOOST_TEST(parallel::to_string({PipeOp::forward, 3, 0}) == "F3");
  BOOST_TEST(parallel::to_string({PipeOp::backward, 3, 1}) == "B3.1");
  BOOST_TEST(parallel::to_string({PipeOp::backward_input, 0, 0}) == "I0");
  BOOST_TEST(parallel::to_string({PipeOp::backward_weight, 12, 2}) == "W12.2");
}

BOOST_AUTO_TEST_CASE(every_schedule_runs_each_pass_once_in_order) {
  for (PipeSchedule s : test::kAllSchedules)
    for (const auto& [p, m, v] : test::schedule_cases(s))
      for (int r = 0; r < p; ++r) {
        BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s) << " p " << p << " m " << m << " v " << v << " rank " << r) {
          check_complete(parallel::pipe_actions(s, p, r, m, v), m, v, s == PipeSchedule::zb_h1);
        }
      }
}

BOOST_AUTO_TEST_CASE(live_micro_batches_within_each_bound) {
  for (PipeSchedule s : test::kAllSchedules)
    for (const auto& [p, m, v] : test::schedule_cases(s))
      for (int r = 0; r < p; ++r) {
        BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s) << " p " << p << " m " << m << " v " << v << " rank " << r) {
          const std::vector<PipeAction> actions = parallel::pipe_actions(s, p, r, m, v);
          const int live = parallel::peak_live_micro_batches(actions);
          switch (s) {
            case PipeSchedule::gpipe: BOOST_TEST(live == m); break;
            // 1F1B: p − r − 1 warm-up forwards, then each forward's backward follows it.
            case PipeSchedule::one_f_one_b: BOOST_TEST(live == std::min(p - r, m)); break;
            // Megatron's interleaved schedule: its warm-up + 1 chunk activations, all m·v
            // when the warm-up takes every pass. Rank 0 holds (v + 1)p − 1 chunks, i.e.
            // p(1 + (p − 1)/(pv)) stages' worth (Korthikanti et al. 2022, "Reducing
            // Activation Recomputation", the interleaved schedule's first stage).
            case PipeSchedule::interleaved:
              BOOST_TEST(live == std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v));
              break;
            // ZB-H1: 1F1B's forwards and input gradients; with the W's held as well, no
            // more than 1F1B's stage 0, min(p, m) (the paper's memory claim).
            case PipeSchedule::zb_h1:
              BOOST_TEST(live == std::min(p - r, m));
              BOOST_TEST(peak_live_until_w(actions) <= std::min(p, m));
              if (r == 0) BOOST_TEST(peak_live_until_w(actions) == std::min(p, m));
              break;
          }
        }
      }
  BOOST_TEST(parallel::peak_live_micro_batches({}) == 0);
}

BOOST_AUTO_TEST_CASE(small_lists_spelled_out) {
  using S = PipeSchedule;
  BOOST_TEST(listing(S::gpipe, 4, 2, 3) == "F0 F1 F2 B0 B1 B2");
  // 1F1B, p 4, m 8: rank 0 has p − 1 = 3 warm-up forwards, five F/B pairs, three backwards.
  BOOST_TEST(listing(S::one_f_one_b, 4, 0, 8) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  BOOST_TEST(listing(S::one_f_one_b, 4, 2, 8) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  BOOST_TEST(listing(S::one_f_one_b, 4, 3, 8) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than the warm-up: all forwards, then all backwards.
  BOOST_TEST(listing(S::one_f_one_b, 4, 0, 2) == "F0 F1 B0 B1");
  // ZB-H1, p 4, m 8 (the paper's Figure 3, stages numbered from 0): 1F1B's order with B
  // split into I and W. Rank 0 keeps no W pending: each W right after its I.
  BOOST_TEST(listing(S::zb_h1, 4, 0, 8) ==
             "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7");
  // Rank 1 keeps one W pending and runs the last one at the end.
  BOOST_TEST(listing(S::zb_h1, 4, 1, 8) ==
             "F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7");
  // Rank 3 (last) keeps three pending: W0 first runs after I3; W5..W7 fill the tail.
  BOOST_TEST(listing(S::zb_h1, 4, 3, 8) ==
             "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7");
  // Interleaved, p 2, v 2, m 4: forwards in groups of p = 2 micro-batches per chunk,
  // (0 1).0 (0 1).1 (2 3).0 (2 3).1; backwards the same groups from the last chunk,
  // (0 1).1 (0 1).0 (2 3).1 (2 3).0. Rank 0's warm-up is (2 − 0 − 1)·2 + (2 − 1)·2 = 4
  // forwards, rank 1's (2 − 1 − 1)·2 + 2 = 2.
  BOOST_TEST(listing(S::interleaved, 2, 0, 4, 2) ==
             "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  BOOST_TEST(listing(S::interleaved, 2, 1, 4, 2) ==
             "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
  // One rank, three chunks: virtual stages 0, 1, 2 all local; warm-up (3 − 1)·1 = 2.
  BOOST_TEST(listing(S::interleaved, 1, 0, 2, 3) == "F0 F0.1 F0.2 B0.2 F1 B0.1 F1.1 B0 F1.2 B1.2 B1.1 B1");
}

BOOST_AUTO_TEST_CASE(bad_arguments_name_the_keys) {
  BOOST_TEST(test::error_message([] { parallel::parse_pipe_schedule("zero_bubble"); }) ==
             "[config] pipeline.schedule must be one of \"gpipe\", \"1f1b\", \"interleaved\" or \"zb_h1\", got "
             "\"zero_bubble\"");
  BOOST_TEST(test::error_message([] { parallel::pipe_actions(PipeSchedule::interleaved, 4, 0, 6, 2); }) ==
             "[config] pipeline: the interleaved schedule needs gradient_accumulation_steps (micro-batches, 6) to be "
             "a multiple of pipeline.stages (4)");
  test::check_error([] { parallel::pipe_actions(PipeSchedule::one_f_one_b, 2, 0, 4, 2); },
                    {"[config] pipeline.virtual_stages must be 1 unless pipeline.schedule is \"interleaved\""});
  test::check_error([] { parallel::check_pipe_schedule(PipeSchedule::gpipe, 0, 4, 1); }, {"pipeline.stages", "got 0"});
  test::check_error([] { parallel::check_pipe_schedule(PipeSchedule::gpipe, 2, 0, 1); },
                    {"gradient_accumulation_steps", "got 0"});
  test::check_error([] { parallel::check_pipe_schedule(PipeSchedule::interleaved, 2, 4, 0); },
                    {"pipeline.virtual_stages", "got 0"});
  test::check_error([] { parallel::pipe_actions(PipeSchedule::zb_h1, 4, 4, 8); }, {"rank 4", "[0, 4)"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_schedule
