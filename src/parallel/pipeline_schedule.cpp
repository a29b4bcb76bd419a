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

std::vector<PipeAction> pipe_actions(PipeSchedule s, int p, int r, int m, int v) {
  check_pipe_schedule(s, p, m, v);
  std::vector<PipeAction> out;
  if (s == PipeSchedule::gpipe || s == PipeSchedule::interleaved) {
    for (int g = 0; g < m; g += p)
      for (int c = 0; c < v; ++c)
        for (int k = g; k < std::min(m, g + p); ++k) out.push_back({PipeOp::forward, k, c});
    for (int g = 0; g < m; g += p)
      for (int c = v - 1; c >= 0; --c)
        for (int k = g; k < std::min(m, g + p); ++k) out.push_back({PipeOp::backward, k, c});
    return out;
  }
  const int warmup = std::min(p - r - 1, m);
  auto back = [&](int k) {
    if (s == PipeSchedule::zb_h1) {
      out.push_back({PipeOp::backward_input, k, 0});
      out.push_back({PipeOp::backward_weight, k, 0});
    } else {
      out.push_back({PipeOp::backward, k, 0});
    }
  };
  for (int k = 0; k < warmup; ++k) out.push_back({PipeOp::forward, k, 0});
  for (int i = 0; i < m - warmup; ++i) out.push_back({PipeOp::forward, warmup + i, 0}), back(i);
  for (int k = m - warmup; k < m; ++k) back(k);
  return out;
}

}  // namespace triad::parallel
