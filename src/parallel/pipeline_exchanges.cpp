// pipe_exchanges and check_pipe_exchanges (Note [Paired pipeline messages]).
#include "parallel/pipeline_exchanges.h"

#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "tensor/error.h"

namespace triad::parallel {

namespace {

using Key = std::tuple<bool, int, int>;
Key key(const PipeMessage& m) { return {m.gradient, m.boundary, m.micro}; }

// What action `a` of rank `rank` receives and sends.
PipeExchange messages_of(const PipeAction& a, int stages, int rank, int chunks) {
  const int vs = a.chunk * stages + rank, last = stages * chunks - 1;
  PipeExchange e;
  if (a.op == PipeOp::forward) {
    if (vs > 0) e.recv = PipeMessage{false, vs, a.micro};
    if (vs < last) e.send = PipeMessage{false, vs + 1, a.micro};
  } else if (a.op == PipeOp::backward || a.op == PipeOp::backward_input) {
    if (vs < last) e.recv = PipeMessage{true, vs + 1, a.micro};
    if (vs > 0) e.send = PipeMessage{true, vs, a.micro};
  }
  return e;
}

// Each send that could go with the rank's next receive (from the same other rank, of an
// agreed shape): the receive, by the send's index in the list.
std::map<size_t, PipeMessage> candidates(const std::vector<PipeExchange>& plan, int stages, int rank) {
  std::map<size_t, PipeMessage> out;
  std::set<int> agreed;  // chunks whose input shape has arrived
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t sender = kNone;  // the last send not yet followed by a receive
  for (size_t i = 0; i < plan.size(); ++i) {
    if (const auto& r = plan[i].recv) {
      const bool shaped = r->gradient || !agreed.insert(r->receiving_chunk(stages)).second;
      if (sender != kNone && shaped && plan[sender].send->to(stages) == r->from(stages) && r->from(stages) != rank)
        out.emplace(sender, *r);
      sender = kNone;
    }
    if (plan[i].send) sender = i;
  }
  return out;
}

}  // namespace

std::string to_string(const PipeMessage& m) {
  return std::string(m.gradient ? "gradient" : "activation") + " of micro-batch " + std::to_string(m.micro) +
         (m.gradient ? " out of virtual stage " : " into virtual stage ") + std::to_string(m.boundary);
}

std::vector<std::vector<PipeExchange>> pipe_exchanges(const std::vector<std::vector<PipeAction>>& lists, int chunks) {
  const int p = int(lists.size());
  std::vector<std::vector<PipeExchange>> plans(static_cast<size_t>(p));
  std::vector<std::map<size_t, PipeMessage>> pairs;
  std::set<std::pair<Key, Key>> any;  // every candidate: (send, receive)
  for (int r = 0; r < p; ++r) {
    for (const PipeAction& a : lists[size_t(r)]) plans[size_t(r)].push_back(messages_of(a, p, r, chunks));
    pairs.push_back(candidates(plans[size_t(r)], p, r));
    for (const auto& [i, recv] : pairs.back()) any.insert({key(*plans[size_t(r)][i].send), key(recv)});
  }
  for (int r = 0; r < p; ++r)
    for (const auto& [i, recv] : pairs[size_t(r)]) {
      PipeExchange& e = plans[size_t(r)][i];
      if (any.count({key(recv), key(*e.send)})) e.send_with = recv;  // the peer's mirror
    }
  return plans;
}

void check_pipe_exchanges(const std::vector<std::vector<PipeAction>>& lists, int chunks) {
  const int p = int(lists.size());
  const std::vector<std::vector<PipeExchange>> plans = pipe_exchanges(lists, chunks);
  std::set<Key> sent, received;           // posted sends and receives
  std::map<Key, Key> paired;              // a posted receive -> the send it waits for too
  std::vector<size_t> next(size_t(p), 0);  // each rank's next action
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      for (size_t& i = next[size_t(r)]; i < plans[size_t(r)].size(); ++i, progress = true) {
        const PipeExchange& e = plans[size_t(r)][i];
        if (e.recv) {
          if (received.insert(key(*e.recv)).second) progress = true;  // may free a peer's pair
          if (!sent.count(key(*e.recv))) break;
          const auto with = paired.find(key(*e.recv));
          if (with != paired.end() && !received.count(with->second)) break;
        }
        if (e.send) sent.insert(key(*e.send));
        if (e.send_with) {
          received.insert(key(*e.send_with));
          paired.emplace(key(*e.send_with), key(*e.send));
        }
      }
    }
  }
  std::ostringstream stuck;
  for (int r = 0; r < p; ++r) {
    const size_t i = next[size_t(r)];
    if (i == plans[size_t(r)].size()) continue;
    const PipeMessage& in = *plans[size_t(r)][i].recv;
    stuck << (stuck.tellp() > 0 ? "; " : "") << "rank " << r << "'s " << to_string(lists[size_t(r)][i]) << " waits";
    if (!sent.count(key(in))) {
      stuck << " for the " << to_string(in);
    } else {
      const Key& out = paired.at(key(in));
      stuck << " for rank " << in.from(p) << " to receive the "
            << to_string(PipeMessage{std::get<0>(out), std::get<1>(out), std::get<2>(out)});
    }
  }
  TRIAD_CHECK(stuck.tellp() == 0, "pipeline: the schedule deadlocks with paired messages: " << stuck.str());
  for (const Key& k : sent)
    TRIAD_CHECK(received.count(k), "pipeline: the " << to_string(PipeMessage{std::get<0>(k), std::get<1>(k), std::get<2>(k)})
                                                    << " is sent and never received");
}

}  // namespace triad::parallel
