// The action lists of Note [Pipeline schedules] (pipeline_schedule.h). Each builder takes
// checked arguments and emits one rank's list; the simulator (estimate/pipeline_time.cpp) and
// the tests hold them to the dependencies.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <set>

#include "tensor/error.h"

namespace triad::parallel {

PipeSchedule parse_pipe_schedule(const std::string& name) {
  if (name == "gpipe") return PipeSchedule::gpipe;
  if (name == "1f1b") return PipeSchedule::one_f_one_b;
  if (name == "interleaved") return PipeSchedule::interleaved;
  if (name == "zb_h1") return PipeSchedule::zb_h1;
  throw Error("[config] pipeline.schedule must be one of \"gpipe\", \"1f1b\", \"interleaved\" or \"zb_h1\", got \"" +
              name + "\"");
}

std::string pipe_schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::gpipe: return "gpipe";
    case PipeSchedule::one_f_one_b: return "1f1b";
    case PipeSchedule::interleaved: return "interleaved";
    case PipeSchedule::zb_h1: return "zb_h1";
  }
  TRIAD_ASSERT_MSG(false, "unknown PipeSchedule " << int(s));
}

std::string to_string(const PipeAction& a) {
  const char* op = a.op == PipeOp::forward          ? "F"
                   : a.op == PipeOp::backward       ? "B"
                   : a.op == PipeOp::backward_input ? "I"
                                                    : "W";
  std::string s(op);
  s += std::to_string(a.micro);
  if (a.chunk > 0) s += '.' + std::to_string(a.chunk);
  return s;
}

void check_pipe_schedule(PipeSchedule s, int stages, int micro_batches, int chunks) {
  TRIAD_CHECK(stages >= 1, "[config] pipeline.stages must be >= 1, got " << stages);
  TRIAD_CHECK(micro_batches >= 1,
              "[config] gradient_accumulation_steps (micro-batches) must be >= 1, got " << micro_batches);
  TRIAD_CHECK(chunks >= 1, "[config] pipeline.virtual_stages must be >= 1, got " << chunks);
  TRIAD_CHECK(chunks == 1 || s == PipeSchedule::interleaved,
              "[config] pipeline.virtual_stages must be 1 unless pipeline.schedule is \"interleaved\", got "
                  << chunks << " with \"" << pipe_schedule_name(s) << "\"");
  TRIAD_CHECK(s != PipeSchedule::interleaved || micro_batches % stages == 0,
              "[config] pipeline: the interleaved schedule needs gradient_accumulation_steps (micro-batches, "
                  << micro_batches << ") to be a multiple of pipeline.stages (" << stages << ")");
}

namespace {

std::vector<PipeAction> gpipe(int m) {
  std::vector<PipeAction> out;
  for (int k = 0; k < m; ++k) out.push_back({PipeOp::forward, k, 0});
  for (int k = 0; k < m; ++k) out.push_back({PipeOp::backward, k, 0});
  return out;
}

std::vector<PipeAction> one_f_one_b(int p, int r, int m) {
  std::vector<PipeAction> out;
  const int warmup = std::min(p - r - 1, m);
  for (int k = 0; k < warmup; ++k) out.push_back({PipeOp::forward, k, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({PipeOp::forward, warmup + i, 0});
    out.push_back({PipeOp::backward, i, 0});
  }
  for (int k = m - warmup; k < m; ++k) out.push_back({PipeOp::backward, k, 0});
  return out;
}

// Megatron's get_model_chunk_id and micro-batch tables for groups of p: pass k of the m·v
// forwards is micro-batch (k / pv)·p + k % p of chunk (k % pv) / p; backward pass k is the
// same micro-batch of chunk v − 1 − (k % pv) / p.
std::vector<PipeAction> interleaved(int p, int r, int m, int v) {
  const int total = m * v;
  const auto pass = [&](int k, PipeOp op) {
    const int in_group = k % (p * v), chunk = in_group / p;
    return PipeAction{op, (k / (p * v)) * p + k % p, op == PipeOp::forward ? chunk : v - 1 - chunk};
  };
  const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  std::vector<PipeAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(pass(k, PipeOp::forward));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(pass(warmup + i, PipeOp::forward));
    out.push_back(pass(i, PipeOp::backward));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(pass(k, PipeOp::backward));
  return out;
}

// 1F1B with each backward split into I then W; rank r keeps up to r W's pending, oldest
// first, and runs the rest after its last I.
std::vector<PipeAction> zb_h1(int p, int r, int m) {
  std::vector<PipeAction> out;
  int next_w = 0;  // the oldest micro-batch whose W has not run
  const auto input_grad = [&](int k) {
    out.push_back({PipeOp::backward_input, k, 0});
    if (k + 1 - next_w > r) out.push_back({PipeOp::backward_weight, next_w++, 0});
  };
  const int warmup = std::min(p - r - 1, m);
  for (int k = 0; k < warmup; ++k) out.push_back({PipeOp::forward, k, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({PipeOp::forward, warmup + i, 0});
    input_grad(i);
  }
  for (int k = m - warmup; k < m; ++k) input_grad(k);
  while (next_w < m) out.push_back({PipeOp::backward_weight, next_w++, 0});
  return out;
}

}  // namespace

std::vector<PipeAction> pipe_actions(PipeSchedule s, int p, int r, int m, int v) {
  check_pipe_schedule(s, p, m, v);
  TRIAD_CHECK(r >= 0 && r < p, "pipe_actions: rank " << r << " is not in [0, " << p << ")");
  switch (s) {
    case PipeSchedule::gpipe: return gpipe(m);
    case PipeSchedule::one_f_one_b: return one_f_one_b(p, r, m);
    case PipeSchedule::interleaved: return interleaved(p, r, m, v);
    case PipeSchedule::zb_h1: return zb_h1(p, r, m);
  }
  TRIAD_ASSERT_MSG(false, "unknown PipeSchedule " << int(s));
}

int peak_live_micro_batches(const std::vector<PipeAction>& actions) {
  std::set<std::pair<int, int>> live;
  size_t peak = 0;
  for (const PipeAction& a : actions) {
    if (a.op == PipeOp::forward) live.insert({a.micro, a.chunk});
    if (a.op == PipeOp::backward || a.op == PipeOp::backward_input) live.erase({a.micro, a.chunk});
    peak = std::max(peak, live.size());
  }
  return int(peak);
}

}  // namespace triad::parallel
