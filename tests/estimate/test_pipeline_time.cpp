// The timing of pipeline schedules (estimate/pipeline_time.h): the simulator's timelines
// keep every dependency of every schedule's lists, match hand-worked timelines and the
// closed-form bubbles where those are exact; broken lists and bad arguments are refused
// with messages that name what is wrong.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <map>

#include "estimate/pipeline_time.h"
#include "support/check.h"
#include "support/pipeline_cases.h"

BOOST_AUTO_TEST_SUITE(test_pipeline_time)

using namespace triad;
using estimate::PipeCosts;
using estimate::PipeTimeline;
using estimate::simulate_pipeline;
using estimate::theoretical_bubble;
using parallel::PipeAction;
using parallel::PipeOp;
using parallel::PipeSchedule;

namespace {

// Re-checks a timeline against the lists: spans in order on each rank, of their costs,
// each starting exactly when the rank is free and its inputs (+ p2p across ranks) are in.
void check_timeline(const std::vector<std::vector<PipeAction>>& lists, int v, const PipeCosts& c,
                    const PipeTimeline& tl) {
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

BOOST_AUTO_TEST_CASE(simulated_timelines_keep_every_dependency) {
  const PipeCosts costs[] = {{1, 1, 1, 0}, {1, 2, 0.5, 0}, {2, 1, 1, 0.25}, {0.7, 1.3, 0.9, 0.1}};
  for (PipeSchedule s : test::kAllSchedules)
    for (const auto& [p, m, v] : test::schedule_cases(s))
      for (const PipeCosts& c : costs) {
        BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s) << " p " << p << " m " << m << " v " << v) {
          const auto lists = all_lists(s, p, m, v);
          const PipeTimeline tl = simulate_pipeline(s, p, m, v, c);
          BOOST_TEST_REQUIRE(tl.spans.size() == size_t(p));
          for (int r = 0; r < p; ++r) BOOST_TEST_REQUIRE(tl.spans[size_t(r)].size() == lists[size_t(r)].size());
          check_timeline(lists, v, c, tl);
        }
      }
}

BOOST_AUTO_TEST_CASE(hand_worked_timelines) {
  // 1F1B, p 2, m 1, F = B = W = 1, messages 0.5: rank 0 F0 [0, 1]; rank 1 F0 [1.5, 2.5],
  // B0 [2.5, 4.5]; rank 0 B0 [5, 7]. Each rank works 3 of 7.
  const PipeTimeline a = simulate_pipeline(PipeSchedule::one_f_one_b, 2, 1, 1, {1, 1, 1, 0.5});
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
  const PipeTimeline f = simulate_pipeline(PipeSchedule::one_f_one_b, 4, 8, 1, {});
  const PipeTimeline z = simulate_pipeline(PipeSchedule::zb_h1, 4, 8, 1, {});
  BOOST_TEST(f.spans[0][4].first == 10);  // B0
  BOOST_TEST(f.makespan == 33);
  BOOST_TEST(f.idle == (std::vector<double>{9, 9, 9, 9}), boost::test_tools::per_element());
  BOOST_TEST(z.spans[0][4].first == 7);  // I0
  BOOST_TEST(z.makespan == 27);
  BOOST_TEST(z.idle == (std::vector<double>{3, 3, 3, 3}), boost::test_tools::per_element());
  for (size_t i = 0; i < z.spans[3].size(); ++i) BOOST_TEST(z.spans[3][i].first == 3.0 + double(i));

  // Interleaved, p 2, v 2, m 4, chunk costs 1 each (backward 2): each rank works
  // 8 · 3 = 24; the bubble is (p − 1)(F + B + W) = 3, a ninth of 27.
  const PipeTimeline i = simulate_pipeline(PipeSchedule::interleaved, 2, 4, 2, {});
  BOOST_TEST(i.makespan == 27);
  BOOST_TEST(i.bubble_fraction == 1.0 / 9, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(simulated_bubble_equals_the_closed_form_where_exact) {
  const auto tol = boost::test_tools::tolerance(1e-12);
  std::vector<PipeCosts> costs;
  for (double f : {0.5, 1.0, 2.0})
    for (double b : {0.5, 1.0, 2.0})
      for (double w : {0.0, 0.5, 1.0, 2.0}) costs.push_back({f, b, w, 0});
  for (PipeSchedule s : test::kAllSchedules)
    for (const auto& [p, m, v] : test::schedule_cases(s))
      for (const PipeCosts& c : costs) {
        BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s)
                           << " p " << p << " m " << m << " v " << v << " F " << c.forward << " B " << c.backward_input
                           << " W " << c.backward_weight) {
          const double sim = simulate_pipeline(s, p, m, v, c).bubble_fraction;
          const double closed = theoretical_bubble(s, p, m, v, c);
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
  BOOST_TEST(theoretical_bubble(PipeSchedule::one_f_one_b, 4, 8, 1, {}) == 3.0 / 11, tol);
  BOOST_TEST(theoretical_bubble(PipeSchedule::interleaved, 4, 8, 2, {}) == 3.0 / 19, tol);
  BOOST_TEST(theoretical_bubble(PipeSchedule::zb_h1, 4, 8, 1, {}) == 3.0 / 27, tol);
}

BOOST_AUTO_TEST_CASE(simulator_rejects_broken_lists) {
  const auto F = [](int k) { return PipeAction{PipeOp::forward, k, 0}; };
  const auto B = [](int k) { return PipeAction{PipeOp::backward, k, 0}; };
  const PipeCosts c;
  // Rank 0 waits for B0's gradient while rank 1 waits for F1 first: a cycle.
  test::check_error([&] { simulate_pipeline({{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}}, 1, c); },
                    {"cannot finish", "rank 0's B0 waits for the input gradient of micro-batch 0 on virtual stage 1",
                     "rank 1's F1 waits for the forward of micro-batch 1 on virtual stage 0"});
  // Rank 1 never runs B1.
  test::check_error([&] { simulate_pipeline({{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1)}}, 1, c); },
                    {"rank 0's B1 waits for the input gradient of micro-batch 1 on virtual stage 1, which no rank runs"});
  test::check_error([&] { simulate_pipeline({{F(0), F(0), B(0)}}, 1, c); }, {"rank 0 runs F0 twice"});
  test::check_error([&] { simulate_pipeline({{F(0), B(0), {PipeOp::backward_weight, 0, 0}}}, 1, c); },
                    {"W0 after a whole backward"});
  test::check_error([&] { simulate_pipeline({{{PipeOp::forward, 0, 1}}}, 1, c); }, {"F0.1", "1 chunks"});
  test::check_error([&] { simulate_pipeline(PipeSchedule::gpipe, 2, 2, 1, {1, -1, 1, 0}); },
                    {"costs must be >= 0"});
}

BOOST_AUTO_TEST_CASE(closed_form_names_the_keys) {
  test::check_error([] { theoretical_bubble(PipeSchedule::zb_h1, 2, 4, 2, {}); }, {"pipeline.virtual_stages"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_time
