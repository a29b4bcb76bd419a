// Pipeline schedules as action lists (Note [Pipeline schedules]), each against its
// definition: every (micro-batch, chunk) runs forward, then backward (ZB-H1: I, then W)
// exactly once on each rank; live activations stay within each schedule's bound; small
// lists are spelled out by hand from the definitions; the simulator's timelines keep every
// dependency, match hand-worked timelines and the closed-form bubbles where those are
// exact; bad arguments name the config keys.
#define BOOST_TEST_MODULE pipeline_schedule
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <map>

#include "parallel/pipeline_schedule.h"
#include "support/check.h"

using namespace triad;
using parallel::PipeAction;
using parallel::PipeCosts;
using parallel::PipeOp;
using parallel::PipeSchedule;

namespace {

const PipeSchedule kAll[] = {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::interleaved,
                             PipeSchedule::zb_h1};

std::string listing(const std::vector<PipeAction>& actions) {
  std::string s;
  for (const PipeAction& a : actions) s += (s.empty() ? "" : " ") + parallel::to_string(a);
  return s;
}

std::string listing(PipeSchedule s, int p, int r, int m, int v = 1) {
  return listing(parallel::pipe_actions(s, p, r, m, v));
}

// The (p, m, v) cases every schedule is checked on (interleaved needs m a multiple of p).
std::vector<std::tuple<int, int, int>> cases(PipeSchedule s) {
  std::vector<std::tuple<int, int, int>> out;
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 5, 8, 12, 16})
      for (int v : {1, 2, 3}) {
        if (s == PipeSchedule::interleaved ? m % p != 0 : v != 1) continue;
        out.push_back({p, m, v});
      }
  return out;
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

// Re-checks a timeline against the lists: spans in order on each rank, of their costs,
// each starting exactly when the rank is free and its inputs (+ p2p across ranks) are in.
void check_timeline(const std::vector<std::vector<PipeAction>>& lists, int v, const PipeCosts& c,
                    const parallel::PipeTimeline& tl) {
  const int p = int(lists.size());
  std::map<std::tuple<char, int, int>, std::pair<double, int>> ends;  // (F|I, vs, micro) -> end, rank
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < lists[size_t(r)].size(); ++i) {
      const PipeAction& a = lists[size_t(r)][i];
      const char kind = a.op == PipeOp::forward ? 'F' : a.op == PipeOp::backward_weight ? 'W' : 'I';
      ends[{kind, a.chunk * p + r, a.micro}] = {tl.spans[size_t(r)][i].second, r};
    }
  double makespan = 0;
  for (int r = 0; r < p; ++r) {
    double free = 0, busy = 0;
    for (size_t i = 0; i < lists[size_t(r)].size(); ++i) {
      const PipeAction& a = lists[size_t(r)][i];
      const int vs = a.chunk * p + r;
      const auto [start, end] = tl.spans[size_t(r)][i];
      double ready = free;
      const auto input = [&](char kind, int from) {
        const auto [t, rank] = ends.at({kind, from, a.micro});
        ready = std::max(ready, t + (rank == r ? 0.0 : c.p2p));
      };
      if (a.op == PipeOp::forward && vs > 0) input('F', vs - 1);
      if (a.op == PipeOp::backward || a.op == PipeOp::backward_input) {
        input('F', vs);
        if (vs < p * v - 1) input('I', vs + 1);
      }
      if (a.op == PipeOp::backward_weight) input('I', vs);
      const double cost = a.op == PipeOp::forward          ? c.forward
                          : a.op == PipeOp::backward       ? c.backward_input + c.backward_weight
                          : a.op == PipeOp::backward_input ? c.backward_input
                                                           : c.backward_weight;
      BOOST_TEST(start == ready, "rank " << r << " " << parallel::to_string(a));
      BOOST_TEST(end == start + cost);
      free = end, busy += cost;
    }
    makespan = std::max(makespan, free);
    BOOST_TEST(tl.idle[size_t(r)] == tl.makespan - busy, boost::test_tools::tolerance(1e-12));
  }
  BOOST_TEST(tl.makespan == makespan);
}

std::vector<std::vector<PipeAction>> all_lists(PipeSchedule s, int p, int m, int v) {
  std::vector<std::vector<PipeAction>> lists;
  for (int r = 0; r < p; ++r) lists.push_back(parallel::pipe_actions(s, p, r, m, v));
  return lists;
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_round_trip) {
  for (PipeSchedule s : kAll) BOOST_TEST(int(parallel::parse_pipe_schedule(parallel::pipe_schedule_name(s))) == int(s));
  BOOST_TEST(parallel::pipe_schedule_name(PipeSchedule::one_f_one_b) == "1f1b");
  BOOST_TEST(parallel::to_string({PipeOp::forward, 3, 0}) == "F3");
  BOOST_TEST(parallel::to_string({PipeOp::backward, 3, 1}) == "B3.1");
  BOOST_TEST(parallel::to_string({PipeOp::backward_input, 0, 0}) == "I0");
  BOOST_TEST(parallel::to_string({PipeOp::backward_weight, 12, 2}) == "W12.2");
}

BOOST_AUTO_TEST_CASE(every_schedule_runs_each_pass_once_in_order) {
  for (PipeSchedule s : kAll)
    for (const auto& [p, m, v] : cases(s))
      for (int r = 0; r < p; ++r) {
        BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s) << " p " << p << " m " << m << " v " << v << " rank " << r) {
          check_complete(parallel::pipe_actions(s, p, r, m, v), m, v, s == PipeSchedule::zb_h1);
        }
      }
}

BOOST_AUTO_TEST_CASE(live_micro_batches_within_each_bound) {
  for (PipeSchedule s : kAll)
    for (const auto& [p, m, v] : cases(s))
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

BOOST_AUTO_TEST_CASE(simulated_timelines_keep_every_dependency) {
  const PipeCosts costs[] = {{1, 1, 1, 0}, {1, 2, 0.5, 0}, {2, 1, 1, 0.25}, {0.7, 1.3, 0.9, 0.1}};
  for (PipeSchedule s : kAll)
    for (const auto& [p, m, v] : cases(s))
      for (const PipeCosts& c : costs) {
        BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s) << " p " << p << " m " << m << " v " << v) {
          const auto lists = all_lists(s, p, m, v);
          const parallel::PipeTimeline tl = parallel::simulate_pipeline(s, p, m, v, c);
          BOOST_TEST_REQUIRE(tl.spans.size() == size_t(p));
          for (int r = 0; r < p; ++r) BOOST_TEST_REQUIRE(tl.spans[size_t(r)].size() == lists[size_t(r)].size());
          check_timeline(lists, v, c, tl);
        }
      }
}

BOOST_AUTO_TEST_CASE(hand_worked_timelines) {
  // 1F1B, p 2, m 1, F = B = W = 1, messages 0.5: rank 0 F0 [0, 1]; rank 1 F0 [1.5, 2.5],
  // B0 [2.5, 4.5]; rank 0 B0 [5, 7]. Each rank works 3 of 7.
  const parallel::PipeTimeline a = parallel::simulate_pipeline(PipeSchedule::one_f_one_b, 2, 1, 1, {1, 1, 1, 0.5});
  using Spans = std::vector<std::pair<double, double>>;
  BOOST_TEST((a.spans[0] == Spans{{0, 1}, {5, 7}}));
  BOOST_TEST((a.spans[1] == Spans{{1.5, 2.5}, {2.5, 4.5}}));
  BOOST_TEST(a.makespan == 7);
  BOOST_TEST(a.idle == (std::vector<double>{4, 4}), boost::test_tools::per_element());
  BOOST_TEST(a.bubble_fraction == 4.0 / 7, boost::test_tools::tolerance(1e-15));

  // ZB-H1 against 1F1B, p 4, m 8, F = B = W = 1. 1F1B: rank 0's first backward (2 long)
  // starts once F0 has reached rank 3 (at 4) and the gradient came back through three
  // backwards: 4 + 3·2 = 10; the step ends at 8·3 + 3·3 = 33. ZB-H1: the input gradient
  // comes back after three I's: 4 + 3 = 7; the last rank, busy from 3 with no gap, ends at
  // 3 + 24 = 27, as does every rank, each idle 3 = (p − 1)(F + B − W): a third of 1F1B's 9.
  const parallel::PipeTimeline f = parallel::simulate_pipeline(PipeSchedule::one_f_one_b, 4, 8, 1, {});
  const parallel::PipeTimeline z = parallel::simulate_pipeline(PipeSchedule::zb_h1, 4, 8, 1, {});
  BOOST_TEST(f.spans[0][4].first == 10);  // B0
  BOOST_TEST(f.makespan == 33);
  BOOST_TEST(f.idle == (std::vector<double>{9, 9, 9, 9}), boost::test_tools::per_element());
  BOOST_TEST(z.spans[0][4].first == 7);  // I0
  BOOST_TEST(z.makespan == 27);
  BOOST_TEST(z.idle == (std::vector<double>{3, 3, 3, 3}), boost::test_tools::per_element());
  for (size_t i = 0; i < z.spans[3].size(); ++i) BOOST_TEST(z.spans[3][i].first == 3.0 + double(i));

  // Interleaved, p 2, v 2, m 4, chunk costs 1 each (backward 2): each rank works
  // 8 · 3 = 24; the bubble is (p − 1)(F + B + W) = 3, a ninth of 27.
  const parallel::PipeTimeline i = parallel::simulate_pipeline(PipeSchedule::interleaved, 2, 4, 2, {});
  BOOST_TEST(i.makespan == 27);
  BOOST_TEST(i.bubble_fraction == 1.0 / 9, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(simulated_bubble_equals_the_closed_form_where_exact) {
  const auto tol = boost::test_tools::tolerance(1e-12);
  std::vector<PipeCosts> costs;
  for (double f : {0.5, 1.0, 2.0})
    for (double b : {0.5, 1.0, 2.0})
      for (double w : {0.0, 0.5, 1.0, 2.0}) costs.push_back({f, b, w, 0});
  for (PipeSchedule s : kAll)
    for (const auto& [p, m, v] : cases(s))
      for (const PipeCosts& c : costs) {
        BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s) << " p " << p << " m " << m << " v " << v << " F "
                                                           << c.forward << " B " << c.backward_input << " W "
                                                           << c.backward_weight) {
          const double sim = parallel::simulate_pipeline(s, p, m, v, c).bubble_fraction;
          const double closed = parallel::theoretical_bubble(s, p, m, v, c);
          if (p == 1) BOOST_TEST(sim == 0);
          if (s != PipeSchedule::zb_h1) {
            // GPipe, 1F1B and interleaved: exact for any costs.
            BOOST_TEST(sim == closed, tol);
          } else if (m >= p && c.backward_weight <= std::min(c.forward, c.backward_input)) {
            // ZB-H1: exact when the W's fit the gaps the paper's figure fills (F = B = W
            // there): m >= p and W no longer than F or B.
            BOOST_TEST(sim == closed, tol);
          } else if (c.forward + c.backward_input >= c.backward_weight) {
            BOOST_TEST(sim >= closed - 1e-12);  // otherwise a lower bound
          }
        }
      }
  // The headline numbers: p 4, m 8, F = B = W.
  BOOST_TEST(parallel::theoretical_bubble(PipeSchedule::one_f_one_b, 4, 8, 1, {}) == 3.0 / 11, tol);
  BOOST_TEST(parallel::theoretical_bubble(PipeSchedule::interleaved, 4, 8, 2, {}) == 3.0 / 19, tol);
  BOOST_TEST(parallel::theoretical_bubble(PipeSchedule::zb_h1, 4, 8, 1, {}) == 3.0 / 27, tol);
}

BOOST_AUTO_TEST_CASE(simulator_rejects_broken_lists) {
  const auto F = [](int k) { return PipeAction{PipeOp::forward, k, 0}; };
  const auto B = [](int k) { return PipeAction{PipeOp::backward, k, 0}; };
  const PipeCosts c;
  // Rank 0 waits for B0's gradient while rank 1 waits for F1 first: a cycle.
  test::check_error([&] { parallel::simulate_pipeline({{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}}, 1, c); },
                    {"cannot finish", "rank 0's B0 waits for the input gradient of micro-batch 0 on virtual stage 1",
                     "rank 1's F1 waits for the forward of micro-batch 1 on virtual stage 0"});
  // Rank 1 never runs B1.
  test::check_error([&] { parallel::simulate_pipeline({{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1)}}, 1, c); },
                    {"rank 0's B1 waits for the input gradient of micro-batch 1 on virtual stage 1, which no rank runs"});
  test::check_error([&] { parallel::simulate_pipeline({{F(0), F(0), B(0)}}, 1, c); }, {"rank 0 runs F0 twice"});
  test::check_error([&] { parallel::simulate_pipeline({{F(0), B(0), {PipeOp::backward_weight, 0, 0}}}, 1, c); },
                    {"W0 after a whole backward"});
  test::check_error([&] { parallel::simulate_pipeline({{{PipeOp::forward, 0, 1}}}, 1, c); }, {"F0.1", "1 chunks"});
  test::check_error([&] { parallel::simulate_pipeline(PipeSchedule::gpipe, 2, 2, 1, {1, -1, 1, 0}); },
                    {"costs must be >= 0"});
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
  test::check_error([] { parallel::theoretical_bubble(PipeSchedule::zb_h1, 2, 4, 2, {}); }, {"pipeline.virtual_stages"});
}
