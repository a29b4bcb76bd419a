// The messages of a pipeline schedule, and which of them travel paired.
//
// Note [Paired pipeline messages]: an action receives at most one message (a forward, its
// input activation from the previous virtual stage; a backward or input-gradient pass, its
// output's gradient from the next) and sends at most one (the forward, its output; the
// backward, its input's gradient). A send goes out as one send_recv with the rank's next
// receive, posted early (Megatron's send_forward_recv_backward and
// send_backward_recv_forward, its batch_isend_irecv), when
//   - that receive comes from the rank the send goes to,
//   - the peer mirrors it: its own send of what this one receives is paired with its next
//     receive, which is what this one sends, and
//   - the receive's shape is agreed (it is not the first activation into its chunk, which
//     its shape header precedes).
// The pair is posted when the send is made, and waited for when the receive is needed.
// In 1F1B's and ZB-H1's steady state every forward's output goes out with the next
// backward's gradient coming in, and every backward's gradient with the next forward's
// input. Other sends are posted alone at once and never waited for until the step's end.
//
// Waiting for a send_recv waits for its send to be received too (a message past MPI's eager
// limit is delivered only once its receive is posted), and pairing without the mirror can
// deadlock lists that run with sends that never wait. Interleaved 1F1B's steady state has
// no mirror (the neighbours' sends and receives belong to different micro-batches), so it
// pairs only in its warm-up and cool-down. Mirrored pairs add no wait: rank r waits on its
// pair until the peer has sent what r receives, and the peer's mirror pair, posted with
// that send, receives what r sends. So the paired lists finish whenever the lists finish
// with lone sends (simulate_pipeline's condition); check_pipe_exchanges runs them with
// paired sends that complete only when received.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace triad::parallel {

// A message across the boundary into virtual stage `boundary`: an activation going up
// (from boundary − 1 to boundary) or a gradient coming down (from boundary to boundary − 1).
struct PipeMessage {
  bool gradient;
  int boundary, micro;
  bool operator==(const PipeMessage&) const = default;
  int from(int stages) const { return (gradient ? boundary : boundary - 1) % stages; }  // sending rank
  int to(int stages) const { return (gradient ? boundary - 1 : boundary) % stages; }    // receiving rank
  int receiving_chunk(int stages) const { return (gradient ? boundary - 1 : boundary) / stages; }
};
std::string to_string(const PipeMessage&);  // "activation of micro-batch 3 into virtual stage 2"

// The messages of one action of a rank's list.
struct PipeExchange {
  std::optional<PipeMessage> recv;  // needed before the action computes
  std::optional<PipeMessage> send;  // made by it
  // When the send is paired: the rank's next receive, posted with it.
  std::optional<PipeMessage> send_with;
};

// The exchanges of every rank's list of actions (lists[r] for rank r; chunks per rank as in
// pipe_actions), one per action (Note [Paired pipeline messages]).
std::vector<std::vector<PipeExchange>> pipe_exchanges(const std::vector<std::vector<PipeAction>>& lists, int chunks);

// Runs every rank's list with its exchanges: a receive completes once its message is
// posted, a paired one once its send has been received too; a lone send never holds its
// rank up. Throws Error naming each stuck rank, its action and what it waits for if the
// ranks cannot all finish, or if a message is sent and never received.
void check_pipe_exchanges(const std::vector<std::vector<PipeAction>>& lists, int chunks);

}  // namespace triad::parallel
