// Pipeline parallelism through the Engine: 10 clipped AdamW steps of a GPT (dropout 0, f32)
// cut into pipeline stages, with every schedule, under every ZeRO stage over the
// data-parallel ranks and with tensor parallelism inside the stages, give the losses and
// final parameters of the single-process run on the same global batches within 1e-5
// relative (parameters: to the largest element; the check: support/pipeline_trajectory.h).
// Layouts by world size: 2: pp2 with each schedule and ZeRO stage; 4: pp4, pp2 x dp2 at
// ZeRO 0-3, pp2 x tp2; 8: pp2 x dp2 x tp2 at ZeRO 0-3, pp4 x dp2 interleaved. In fp16 the
// stages skip the overflowed steps one process skips, their seed made on the device.
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

engine::TrainConfig config_for(const Layout& l, bool fp16 = false) {
  nlohmann::json j = {
      {"model",
       {{"n_layer", 6},
        {"n_head", 2},
        {"d_model", 16},
        {"seq_len", kSeq},
        {"vocab_size", kVocab},
        {"tensor_parallel", l.tp}}},
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
  // 2^20 overflows the first steps, each halving the scale, until the gradients fit (the
  // scale never grows back within the run: no verdict near f16's edge, where layouts'
  // roundings could differ).
  if (fp16) j["fp16"] = {{"enabled", true}, {"initial_scale_power", 20}, {"hysteresis", 1}};
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

// fp16 in pipeline stages: the last stage seeds its losses' backward with the loss scale
// made on the device (Note [Loss scale on the device]), and the stages skip the same
// overflowed steps as one process does, at the same scales, with losses within f16's
// rounding.
BOOST_AUTO_TEST_CASE(fp16_stages_skip_the_steps_one_process_skips) {
  const int world = parallel::world()->size();
  const Layout l{.pp = world == 8 ? 4 : 2, .dp = world == 2 ? 1 : 2};
  const auto run = [&](engine::Engine& e, const parallel::ProcessGrid* grid) {
    BOOST_TEST(e.zero()->loss_scale_on_device());
    std::vector<double> out;  // per step: the mean loss, skipped, the scale after it
    for (int64_t step = 0; step < kSteps; ++step) {
      const Tensor tokens = global_tokens(step);
      std::vector<Tensor> inputs, targets;
      for (int64_t m = 0; m < kMicro; ++m) {
        const auto [x, y] = micro_batch(tokens, m, grid ? grid->dp_rank() : 0, grid ? l.dp : 1);
        inputs.push_back(x), targets.push_back(y);
      }
      double sum = 0;
      if (grid) {
        Tensor s = Tensor::full({1}, ops::sum(e.forward_backward(inputs, targets)).item(), DType::f64);
        grid->dp()->all_reduce(s)->wait();
        sum = s.item() / double(l.dp);
      } else {
        for (int64_t m = 0; m < kMicro; ++m) {
          const Tensor loss = e.forward(inputs[size_t(m)], targets[size_t(m)]);
          e.backward(loss);
          sum += loss.item();
        }
      }
      const engine::StepResult r = e.step();
      out.insert(out.end(), {sum / double(kMicro), r.skipped ? 1.0 : 0.0, r.loss_scale});
    }
    return out;
  };
  engine::Engine one(config_for({}, true));
  const std::vector<double> want = run(one, nullptr);
  const auto grid =
      std::make_shared<const parallel::ProcessGrid>(parallel::world(), parallel::GridLayout{.dp = l.dp, .pp = l.pp});
  engine::Engine staged(config_for(l, true), grid);
  const std::vector<double> got = run(staged, grid.get());
  int skipped = 0;
  for (size_t s = 0; s < want.size(); s += 3) {
    BOOST_TEST(std::abs(got[s] - want[s]) / want[s] < 1e-3, "step " << s / 3 << " loss");
    BOOST_TEST(got[s + 1] == want[s + 1], "step " << s / 3 << " skipped");
    BOOST_TEST(got[s + 2] == want[s + 2], "step " << s / 3 << " scale");
    skipped += int(want[s + 1]);
  }
  BOOST_TEST(skipped >= 2);
  BOOST_TEST(skipped < kSteps);
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_mpi
