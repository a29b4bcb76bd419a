// Paired pipeline messages (Note [Paired pipeline messages]): which sends travel with the
// next receive, spelled out from the definition for small 1F1B, GPipe and interleaved
// lists; every schedule runs to the end when paired sends complete only once received;
// lists that deadlock, and messages nobody receives, are named.
#include <boost/test/unit_test.hpp>

#include "parallel/pipeline_exchanges.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_pipeline_exchanges)

using namespace triad;
using parallel::PipeAction;
using parallel::PipeOp;
using parallel::PipeSchedule;

namespace {

// Each action as in to_string, then "^" when its send goes out with the rank's next
// receive, and "+" when its receive was posted with an earlier send.
std::string pairing(PipeSchedule s, int p, int r, int m, int v = 1) {
  std::vector<std::vector<PipeAction>> lists;
  for (int q = 0; q < p; ++q) lists.push_back(parallel::pipe_actions(s, p, q, m, v));
  const std::vector<PipeAction>& actions = lists[size_t(r)];
  const std::vector<parallel::PipeExchange> ex = parallel::pipe_exchanges(lists, v)[size_t(r)];
  std::string out;
  bool posted = false;  // the next receive was posted with a send
  for (size_t i = 0; i < actions.size(); ++i) {
    out += (out.empty() ? "" : " ") + parallel::to_string(actions[i]);
    if (ex[i].recv && posted) out += "+", posted = false;
    if (ex[i].send_with) out += "^", posted = true;
  }
  return out;
}

PipeAction F(int m, int c = 0) { return {PipeOp::forward, m, c}; }
PipeAction B(int m, int c = 0) { return {PipeOp::backward, m, c}; }

}  // namespace

BOOST_AUTO_TEST_CASE(one_f_one_b_pairs_its_steady_state) {
  // Rank 0: its output goes out with the gradient of the backward that follows each forward.
  BOOST_TEST(pairing(PipeSchedule::one_f_one_b, 2, 0, 4) == "F0 F1^ B0+ F2^ B1+ F3^ B2+ B3");
  // Rank 1 (the last): each gradient goes out with the next forward's input.
  BOOST_TEST(pairing(PipeSchedule::one_f_one_b, 2, 1, 4) == "F0 B0^ F1+ B1^ F2+ B2^ F3+ B3");
  // A middle rank of three does both.
  BOOST_TEST(pairing(PipeSchedule::one_f_one_b, 3, 1, 4) == "F0 F1^ B0+^ F2+^ B1+^ F3+^ B2+ B3");
  // ZB-H1 pairs like 1F1B: an I's gradient goes out with the next forward's input, past
  // the W between them, which moves no messages.
  BOOST_TEST(pairing(PipeSchedule::zb_h1, 2, 1, 4) == "F0 I0^ F1+ I1^ W0 F2+ I2^ W1 F3+ I3 W2 W3");
  // GPipe: rank 1's turn from forwards to backwards would pair, but the last rank's
  // gradient of micro-batch 0 follows all its forwards, so nothing is mirrored.
  BOOST_TEST(pairing(PipeSchedule::gpipe, 3, 1, 2) == "F0 F1 B0 B1");
}

BOOST_AUTO_TEST_CASE(interleaved_pairs_where_the_peer_mirrors) {
  // Two ranks, two chunks, m = p: rank 1's chunk 0 sends up to rank 0's chunk 1, its
  // neighbour both ways. Each chunk's first input follows its shape header and pairs with
  // nothing (nor does its mirror); after those, every send goes with the next receive.
  BOOST_TEST(pairing(PipeSchedule::interleaved, 2, 0, 2, 2) == "F0 F1 F0.1 F1.1^ B0.1+^ B1.1+^ B0+ B1");
  BOOST_TEST(pairing(PipeSchedule::interleaved, 2, 1, 2, 2) == "F0 F1 F0.1 B0.1^ F1.1+ B1.1^ B0+^ B1+");
  // m = 2p: rank 0's F3 output and B1.1's gradient would pair, but rank 1 sends that
  // gradient after F2 (not before F3): unmirrored, the steady state sends alone.
  BOOST_TEST(pairing(PipeSchedule::interleaved, 2, 0, 4, 2) ==
             "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1^ B3.1+^ B2+ B3");
}

BOOST_AUTO_TEST_CASE(every_schedule_finishes_with_paired_sends) {
  for (PipeSchedule s :
       {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::interleaved, PipeSchedule::zb_h1})
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 4, 5, 8, 12, 16})
        for (int v : {1, 2, 3}) {
          if (s == PipeSchedule::interleaved ? m % p != 0 : v != 1) continue;
          std::vector<std::vector<PipeAction>> lists;
          for (int r = 0; r < p; ++r) lists.push_back(parallel::pipe_actions(s, p, r, m, v));
          BOOST_TEST_CONTEXT(parallel::pipe_schedule_name(s) << " p " << p << " m " << m << " v " << v) {
            BOOST_CHECK_NO_THROW(parallel::check_pipe_exchanges(lists, v));
          }
        }
}

BOOST_AUTO_TEST_CASE(deadlocks_and_lost_messages_are_named) {
  // Rank 1 starts with micro-batch 1, which rank 0 sends only after micro-batch 0's backward.
  test::check_error([] { parallel::check_pipe_exchanges({{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}}, 1); },
                    {"deadlocks with paired messages",
                     "rank 0's B0 waits for the gradient of micro-batch 0 out of virtual stage 1",
                     "rank 1's F1 waits for the activation of micro-batch 1 into virtual stage 1"});
  test::check_error([] { parallel::check_pipe_exchanges({{F(0)}, {}}, 1); },
                    {"activation of micro-batch 0 into virtual stage 1", "never received"});
  test::check_error([] { parallel::check_pipe_exchanges({{F(0), B(0)}, {F(0)}}, 1); },
                    {"rank 0's B0 waits for the gradient of micro-batch 0 out of virtual stage 1"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_exchanges
