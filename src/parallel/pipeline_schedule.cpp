#include "parallel/pipeline_schedule.h"

#include <algorithm>

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
  return "";
}

std::string to_string(const PipeAction& a) {
  const char* op = a.op == PipeOp::forward ? "F" : a.op == PipeOp::backward ? "B" : a.op == PipeOp::backward_input ? "I" : "W";
  return op + std::to_string(a.micro) + "." + std::to_string(a.chunk);
}

void check_pipe_schedule(PipeSchedule s, int stages, int micro_batches, int chunks) {
  TRIAD_CHECK(stages >= 1 && micro_batches >= 1 && chunks >= 1, "[config] pipeline: bad arguments");
  TRIAD_CHECK(chunks == 1 || s == PipeSchedule::interleaved,
              "[config] pipeline.virtual_stages must be 1 unless pipeline.schedule is \"interleaved\"");
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

// PipeDream-flush: p − r − 1 warm-up forwards, then one forward and one backward in turn,
// then the remaining backwards.
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

// Megatron-LM's interleaved 1F1B: the m·v (micro-batch, chunk) passes taken in groups of
// p micro-batches per chunk (forwards chunk 0 → v−1, backwards v−1 → 0), with
// (p − r − 1)·2 + (v − 1)·p warm-up forwards.
std::vector<PipeAction> interleaved(int p, int r, int m, int v) {
  const int total = m * v;
  const auto pass = [&](int k, bool forward) {
    const int in_group = k % (p * v);
    const int chunk = in_group / p;
    return PipeAction{forward ? PipeOp::forward : PipeOp::backward, (k / (p * v)) * p + in_group % p,
                      forward ? chunk : v - 1 - chunk};
  };
  const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  std::vector<PipeAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(pass(k, true));
  for (int i = 0; i < total - warmup; ++i) out.push_back(pass(warmup + i, true)), out.push_back(pass(i, false));
  for (int k = total - warmup; k < total; ++k) out.push_back(pass(k, false));
  return out;
}

// ZB-H1: 1F1B's forwards and input-gradient passes, each micro-batch's weight-gradient pass
// W deferred: stage r keeps up to r of them pending (the stages after the first have that
// much slack under 1F1B's bound of p micro-batches in flight: r fewer warm-up forwards) and
// runs the rest at the end, where 1F1B would wait for the last gradients.
std::vector<PipeAction> zb_h1(int p, int r, int m) {
  std::vector<PipeAction> out;
  std::vector<int> pending;
  size_t next = 0;
  const auto input_grad = [&](int k) {
    out.push_back({PipeOp::backward_input, k, 0});
    pending.push_back(k);
    if (int(pending.size() - next) > r) out.push_back({PipeOp::backward_weight, pending[next++], 0});
  };
  const int warmup = std::min(p - r - 1, m);
  for (int k = 0; k < warmup; ++k) out.push_back({PipeOp::forward, k, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({PipeOp::forward, warmup + i, 0});
    input_grad(i);
  }
  for (int k = m - warmup; k < m; ++k) input_grad(k);
  while (next < pending.size()) out.push_back({PipeOp::backward_weight, pending[next++], 0});
  return out;
}

}  // namespace

std::vector<PipeAction> pipe_actions(PipeSchedule s, int p, int r, int m, int v) {
  check_pipe_schedule(s, p, m, v);
  switch (s) {
    case PipeSchedule::gpipe: return gpipe(m);
    case PipeSchedule::one_f_one_b: return one_f_one_b(p, r, m);
    case PipeSchedule::interleaved: return interleaved(p, r, m, v);
    case PipeSchedule::zb_h1: return zb_h1(p, r, m);
  }
  return {};
}

}  // namespace triad::parallel
