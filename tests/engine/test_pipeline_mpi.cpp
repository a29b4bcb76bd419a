// Pipeline parallelism through the Engine: 10 clipped AdamW steps of a GPT (dropout 0, f32)
// cut into pipeline stages, with every schedule, under every ZeRO stage over the
// data-parallel ranks and with tensor parallelism inside the stages, give the losses and
// final parameters of the single-process run on the same global batches within 1e-5
// relative (parameters: to the largest element; the check: support/pipeline_trajectory.h).
// Layouts by world size: 2: pp2 with each schedule and ZeRO stage; 4: pp4, pp2 x dp2 at
// ZeRO 0-3, pp2 x tp2; 8: pp2 x dp2 x tp2 at ZeRO 0-3, pp4 x dp2 interleaved.
#include <boost/test/unit_test.hpp>

#include "config/config.h"
#include "engine/engine.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "support/pipeline_trajectory.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_pipeline_mpi)

using namespace triad;
using namespace triad::test::pipe;

namespace {

struct Layout {
  int pp = 1, dp = 1, tp = 1, zero = 0;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string partition = "parameters";
};

std::string str(const Layout& l) {
  return "pp " + std::to_string(l.pp) + " dp " + std::to_string(l.dp) + " tp " + std::to_string(l.tp) + " zero " +
         std::to_string(l.zero) + " " + l.schedule + " v " + std::to_string(l.virtual_stages) + " " + l.partition;
}

engine::TrainConfig config_for(const Layout& l) {
  const nlohmann::json j = {
      {"model",
       {{"n_layer", 6}, {"n_head", 2}, {"d_model", 16}, {"seq_len", kSeq}, {"vocab_size", kVocab}, {"tensor_parallel", l.tp}}},
      {"pipeline",
       {{"stages", l.pp}, {"schedule", l.schedule}, {"virtual_stages", l.virtual_stages}, {"partition", l.partition}}},
      {"train_batch_size", kBatch},
      {"gradient_accumulation_steps", kMicro},
      {"steps", kSteps},
      {"seed", 7},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
      {"gradient_clipping", 0.5},
      // overlap_comm: a chunk's gradients are reduced behind the stage's remaining backwards
      {"zero_optimization", {{"stage", l.zero}, {"stage3_param_persistence_threshold", 0}, {"overlap_comm", true}}}};
  return engine::parse_config(j, int64_t(l.pp) * l.dp * l.tp);
}

Trajectory single_process() {
  engine::Engine e(config_for({}));
  return train_one_process(e);
}

Trajectory pipelined(const Layout& l) {
  const auto grid = std::make_shared<const parallel::ProcessGrid>(
      parallel::world(), parallel::GridLayout{.tp = l.tp, .dp = l.dp, .pp = l.pp});
  engine::Engine e(config_for(l), grid);
  return train_pipelined(e, *grid);
}

std::vector<Layout> layouts(int world) {
  std::vector<Layout> out;
  if (world == 2) {
    for (const char* s : {"gpipe", "1f1b", "zb_h1"}) out.push_back({.pp = 2, .schedule = s});
    out.push_back({.pp = 2, .schedule = "interleaved", .virtual_stages = 2});
    out.push_back({.pp = 2, .partition = "uniform"});
    out.push_back({.pp = 2, .partition = "type:Block"});
    for (int zero = 1; zero <= 3; ++zero) out.push_back({.pp = 2, .zero = zero});
  } else if (world == 4) {
    out.push_back({.pp = 4});
    out.push_back({.pp = 4, .schedule = "zb_h1"});
    for (int zero = 0; zero <= 3; ++zero) out.push_back({.pp = 2, .dp = 2, .zero = zero});
    out.push_back({.pp = 2, .dp = 2, .zero = 3, .schedule = "zb_h1"});
    out.push_back({.pp = 2, .tp = 2, .zero = 1});
  } else if (world == 8) {
    for (int zero = 0; zero <= 3; ++zero) out.push_back({.pp = 2, .dp = 2, .tp = 2, .zero = zero});
    out.push_back({.pp = 4, .dp = 2, .schedule = "interleaved", .virtual_stages = 2});
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_layout_and_schedule_equals_one_process) {
  const Trajectory ref = single_process();
  BOOST_TEST(ref.losses.back() < ref.losses.front() - 0.05);
  const std::vector<Layout> runs = layouts(parallel::world()->size());
  BOOST_REQUIRE(!runs.empty());
  for (const Layout& l : runs) check_equal(pipelined(l), ref, str(l));
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_mpi
