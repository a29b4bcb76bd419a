// Pipeline schedules as data: the actions one stage runs for one optimizer step.
#pragma once

#include <string>
#include <vector>

namespace triad::parallel {

enum class PipeSchedule { gpipe, one_f_one_b, interleaved, zb_h1 };
PipeSchedule parse_pipe_schedule(const std::string& name);
std::string pipe_schedule_name(PipeSchedule);

enum class PipeOp { forward, backward, backward_input, backward_weight };
struct PipeAction {
  PipeOp op;
  int micro;
  int chunk;
  bool operator==(const PipeAction&) const = default;
};
std::string to_string(const PipeAction&);

void check_pipe_schedule(PipeSchedule, int stages, int micro_batches, int chunks);
std::vector<PipeAction> pipe_actions(PipeSchedule, int stages, int rank, int micro_batches, int chunks = 1);

}  // namespace triad::parallel
