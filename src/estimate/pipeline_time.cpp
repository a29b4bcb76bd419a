// simulate_pipeline and theoretical_bubble (pipeline_time.h): the time a step of a
// schedule takes when every action runs as soon as its rank is free and its inputs are
// there. Each action's start depends only on its rank's previous end and on the ends of
// its inputs, so the timeline does not depend on the order ranks are advanced in.
#include "estimate/pipeline_time.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

#include "tensor/error.h"

namespace triad::estimate {

using parallel::PipeAction;
using parallel::PipeOp;
using parallel::PipeSchedule;

namespace {

constexpr double kNotYet = -1;

// The simulation's state: when each (virtual stage, micro-batch)'s forward and input
// gradient ended (kNotYet before), and whether the input gradient was a split one (I).
struct Ends {
  int p, v, m;
  std::vector<double> forward, input_grad;
  std::vector<char> split;
  Ends(int p_, int v_, int m_)
      : p(p_), v(v_), m(m_), forward(size_t(p * v) * size_t(m), kNotYet), input_grad(forward),
        split(forward.size(), 0) {}
  size_t at(int vs, int micro) const { return size_t(vs) * size_t(m) + size_t(micro); }
};

// An input an action waits for: the forward or the input gradient of (virtual stage, micro).
struct Input {
  bool forward;
  int vs, micro;
};

std::string describe(const Input& in) {
  return std::string(in.forward ? "the forward" : "the input gradient") + " of micro-batch " +
         std::to_string(in.micro) + " on virtual stage " + std::to_string(in.vs);
}

// When `a` on rank r can start as far as its inputs go (each input's end, plus p2p when it
// was made on another rank), or kNotYet with `missing` set to an input not yet made.
double ready_time(const Ends& e, const PipeAction& a, int r, const PipeCosts& costs, Input& missing) {
  const int vs = a.chunk * e.p + r, last = e.p * e.v - 1;
  std::vector<Input> inputs;
  if (a.op == PipeOp::forward && vs > 0) inputs.push_back({true, vs - 1, a.micro});
  if (a.op == PipeOp::backward || a.op == PipeOp::backward_input) {
    inputs.push_back({true, vs, a.micro});
    if (vs < last) inputs.push_back({false, vs + 1, a.micro});
  }
  if (a.op == PipeOp::backward_weight) inputs.push_back({false, vs, a.micro});
  double t = 0;
  for (const Input& in : inputs) {
    const double end = (in.forward ? e.forward : e.input_grad)[e.at(in.vs, in.micro)];
    if (end == kNotYet) {
      missing = in;
      return kNotYet;
    }
    t = std::max(t, end + (in.vs % e.p == r ? 0.0 : costs.p2p));
  }
  TRIAD_CHECK(a.op != PipeOp::backward_weight || e.split[e.at(vs, a.micro)],
              "pipeline simulation: rank " << r << " runs " << to_string(a) << " after a whole backward");
  return t;
}

double cost_of(PipeOp op, const PipeCosts& c) {
  switch (op) {
    case PipeOp::forward: return c.forward;
    case PipeOp::backward: return c.backward_input + c.backward_weight;
    case PipeOp::backward_input: return c.backward_input;
    case PipeOp::backward_weight: return c.backward_weight;
  }
  return 0;
}

}  // namespace

PipeTimeline simulate_pipeline(const std::vector<std::vector<PipeAction>>& lists, int chunks, const PipeCosts& costs) {
  const int p = int(lists.size());
  TRIAD_CHECK(p >= 1 && chunks >= 1, "pipeline simulation: needs >= 1 rank and chunk, got " << p << ", " << chunks);
  TRIAD_CHECK(costs.forward >= 0 && costs.backward_input >= 0 && costs.backward_weight >= 0 && costs.p2p >= 0,
              "pipeline simulation: costs must be >= 0, got F " << costs.forward << ", B " << costs.backward_input
                                                                << ", W " << costs.backward_weight << ", p2p "
                                                                << costs.p2p);
  int m = 0;
  for (int r = 0; r < p; ++r) {
    std::set<std::tuple<PipeOp, int, int>> seen;
    for (const PipeAction& a : lists[size_t(r)]) {
      TRIAD_CHECK(a.micro >= 0 && a.chunk >= 0 && a.chunk < chunks,
                  "pipeline simulation: rank " << r << " has " << to_string(a) << ", outside " << chunks << " chunks");
      TRIAD_CHECK(seen.insert({a.op, a.micro, a.chunk}).second,
                  "pipeline simulation: rank " << r << " runs " << to_string(a) << " twice");
      m = std::max(m, a.micro + 1);
    }
  }
  Ends ends(p, chunks, m);
  PipeTimeline tl;
  tl.spans.resize(size_t(p));
  std::vector<double> free_at(size_t(p), 0.0), busy(size_t(p), 0.0);
  std::vector<Input> waiting(static_cast<size_t>(p));
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& spans = tl.spans[size_t(r)];
      const auto& list = lists[size_t(r)];
      while (spans.size() < list.size()) {
        const PipeAction& a = list[spans.size()];
        const double ready = ready_time(ends, a, r, costs, waiting[size_t(r)]);
        if (ready == kNotYet) break;
        const double cost = cost_of(a.op, costs), start = std::max(free_at[size_t(r)], ready), end = start + cost;
        spans.push_back({start, end});
        free_at[size_t(r)] = end, busy[size_t(r)] += cost;
        const size_t i = ends.at(a.chunk * p + r, a.micro);
        if (a.op == PipeOp::forward) ends.forward[i] = end;
        if (a.op == PipeOp::backward || a.op == PipeOp::backward_input) {
          ends.input_grad[i] = end;
          ends.split[i] = a.op == PipeOp::backward_input;
        }
        progress = true;
      }
    }
  }
  std::set<std::tuple<bool, int, int>> made;  // every input some rank's list makes
  for (int r = 0; r < p; ++r)
    for (const PipeAction& a : lists[size_t(r)])
      if (a.op != PipeOp::backward_weight) made.insert({a.op == PipeOp::forward, a.chunk * p + r, a.micro});
  std::ostringstream stuck;
  for (int r = 0; r < p; ++r) {
    if (tl.spans[size_t(r)].size() == lists[size_t(r)].size()) continue;
    const Input& in = waiting[size_t(r)];
    stuck << (stuck.tellp() > 0 ? "; " : "") << "rank " << r << "'s "
          << to_string(lists[size_t(r)][tl.spans[size_t(r)].size()]) << " waits for " << describe(in)
          << (made.count({in.forward, in.vs, in.micro}) ? "" : ", which no rank runs");
  }
  TRIAD_CHECK(stuck.tellp() == 0, "pipeline simulation: the schedule cannot finish: " << stuck.str());
  tl.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (int r = 0; r < p; ++r) {
    tl.idle.push_back(tl.makespan - busy[size_t(r)]);
    tl.bubble_fraction += tl.makespan > 0 ? tl.idle.back() / tl.makespan / p : 0;
  }
  return tl;
}

PipeTimeline simulate_pipeline(PipeSchedule s, int stages, int micro_batches, int chunks, const PipeCosts& costs) {
  std::vector<std::vector<PipeAction>> lists;
  for (int r = 0; r < stages; ++r) lists.push_back(parallel::pipe_actions(s, stages, r, micro_batches, chunks));
  return simulate_pipeline(lists, chunks, costs);
}

double theoretical_bubble(PipeSchedule s, int stages, int micro_batches, int chunks, const PipeCosts& costs) {
  parallel::check_pipe_schedule(s, stages, micro_batches, chunks);
  const double p = stages, m = micro_batches, v = chunks;
  const double f = costs.forward, b = costs.backward_input, w = costs.backward_weight;
  switch (s) {
    case PipeSchedule::gpipe:
    case PipeSchedule::one_f_one_b: return (p - 1) / (m + p - 1);
    case PipeSchedule::interleaved: return (p - 1) / (v * m + p - 1);
    case PipeSchedule::zb_h1: {
      const double bubble = (p - 1) * (f + b - w);
      return bubble / (m * (f + b + w) + bubble);
    }
  }
  TRIAD_ASSERT_MSG(false, "unknown PipeSchedule " << int(s));
}

}  // namespace triad::estimate
