// peak_activation_bytes on schedules whose lists test_pipeline_schedule spells out, each
// peak worked by hand from the list (saved bytes in tens, deferred in ones, so a sum shows
// which pairs it holds).
#include <boost/test/unit_test.hpp>

#include "estimate/pipeline_memory.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_pipeline_memory)

using namespace triad;
using estimate::ChunkBytes;
using parallel::PipeSchedule;

namespace {

double peak(PipeSchedule s, int p, int r, int m, const std::vector<ChunkBytes>& chunks) {
  return estimate::peak_activation_bytes(parallel::pipe_actions(s, p, r, m, int(chunks.size())), chunks);
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_f_one_b_holds_p_minus_r_micro_batches) {
  // p 4, m 8: rank r's warm-up leaves min(p − r, m) forwards outstanding.
  for (int r = 0; r < 4; ++r) BOOST_TEST(peak(PipeSchedule::one_f_one_b, 4, r, 8, {{10, 1}}) == 10.0 * (4 - r));
  // m 2 < p: all forwards, then all backwards.
  BOOST_TEST(peak(PipeSchedule::one_f_one_b, 4, 0, 2, {{10, 1}}) == 20.0);
}

BOOST_AUTO_TEST_CASE(gpipe_holds_every_micro_batch) {
  for (int r = 0; r < 4; ++r) BOOST_TEST(peak(PipeSchedule::gpipe, 4, r, 8, {{10, 1}}) == 80.0);
}

BOOST_AUTO_TEST_CASE(zb_h1_adds_the_pending_weight_gradients) {
  // Rank 0 runs each W right after its I: 1F1B's four micro-batches.
  BOOST_TEST(peak(PipeSchedule::zb_h1, 4, 0, 8, {{10, 1}}) == 40.0);
  // Rank 1, "F0 F1 F2 I0 F3 ...": at F3, F1..F3 live and W0 pending: 3·10 + 1.
  BOOST_TEST(peak(PipeSchedule::zb_h1, 4, 1, 8, {{10, 1}}) == 31.0);
  // Rank 3, "F0 I0 F1 I1 F2 I2 F3 I3 W0 ...": at F3, F3 live and W0..W2 pending: 10 + 3.
  BOOST_TEST(peak(PipeSchedule::zb_h1, 4, 3, 8, {{10, 1}}) == 13.0);
}

BOOST_AUTO_TEST_CASE(interleaved_weighs_each_chunk) {
  // p 2, v 2, m 4; chunk 0 keeps 10, chunk 1 keeps 100. Rank 0,
  // "F0 F1 F0.1 F1.1 F2 B0.1 ...": at F2, micro-batches 0-2 of chunk 0 and 0-1 of chunk 1:
  // 230, where five pairs at the larger chunk's size would be 500.
  BOOST_TEST(peak(PipeSchedule::interleaved, 2, 0, 4, {{10, 0}, {100, 0}}) == 230.0);
  BOOST_TEST(parallel::peak_live_micro_batches(parallel::pipe_actions(PipeSchedule::interleaved, 2, 0, 4, 2)) == 5);
  // Rank 1, "F0 F1 F0.1 B0.1 ...": at most two of chunk 0 and one of chunk 1.
  BOOST_TEST(peak(PipeSchedule::interleaved, 2, 1, 4, {{10, 0}, {100, 0}}) == 120.0);
}

BOOST_AUTO_TEST_CASE(a_chunk_outside_the_list_is_an_error) {
  test::check_error(
      [] {
        estimate::peak_activation_bytes(parallel::pipe_actions(PipeSchedule::interleaved, 2, 0, 4, 2), {{10, 0}});
      },
      {"names chunk 1 of 1"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_memory
