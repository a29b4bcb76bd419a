// Pipeline parallelism through the Engine: 10 clipped AdamW steps of a GPT (dropout 0, f32)
// cut into pipeline stages, with every schedule, under every ZeRO stage over the
// data-parallel ranks and with tensor parallelism inside the stages, give the losses and
// final parameters of the single-process run on the same global batches within 1e-5
// relative (parameters: to the largest element). Layouts by world size: 2: pp2 with each schedule and ZeRO stage; 4: pp4, pp2 x
// dp2 at ZeRO 0-3, pp2 x tp2; 8: pp2 x dp2 x tp2 at ZeRO 0-3, pp4 x dp2 interleaved.
#define BOOST_TEST_MODULE pipeline_mpi
#include <boost/test/unit_test.hpp>
#include <map>

#include "engine/config.h"
#include "engine/engine.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/mpi_fixture.h"
#include "triad.h"

using namespace triad;
using test::MpiFixture;
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

namespace {

constexpr int64_t kBatch = 8, kSeq = 8, kSteps = 10, kVocab = 32, kMicro = 4;

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

Tensor global_tokens(int64_t step) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kBatch * (kSeq + 1); ++i)
    ids.push_back(int64_t(random_bits(500 + uint64_t(step % 2), uint64_t(i)) % uint64_t(kVocab)));
  return Tensor::from_vector(ids, {kBatch, kSeq + 1});
}

// Micro-batch m of data-parallel rank r, as the trainer takes its rows.
std::pair<Tensor, Tensor> micro_batch(const Tensor& tokens, int64_t m, int r, int dp) {
  const int64_t rows = kBatch / (kMicro * dp);
  const Tensor part = ops::narrow(tokens, 0, (m * dp + r) * rows, rows);
  return {ops::contiguous(ops::narrow(part, 1, 0, kSeq)), ops::contiguous(ops::narrow(part, 1, 1, kSeq))};
}

struct Trajectory {
  std::vector<double> losses;
  std::map<std::string, Tensor> params;  // the ones this rank holds, at their global shapes
  double scale = 0;                      // the largest parameter element (single process)
};

Trajectory single_process() {
  engine::Engine e(config_for({}));
  Trajectory t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    double sum = 0;
    for (int64_t m = 0; m < kMicro; ++m) {
      const auto [x, y] = micro_batch(tokens, m, 0, 1);
      const Tensor l = e.forward(x, y);
      e.backward(l);
      sum += l.item();
    }
    e.step();
    t.losses.push_back(sum / kMicro);
  }
  for (const auto& [name, p] : e.model().named_parameters()) {
    t.params[name] = ops::clone(p);
    t.scale = std::max(t.scale, ops::max_abs(p));
  }
  return t;
}

Trajectory pipelined(const Layout& l) {
  const parallel::ProcessGrid grid(parallel::world(), l.tp, l.dp, l.pp);
  engine::Engine e(config_for(l), grid.dp(), grid.tp(), grid.pp());
  BOOST_REQUIRE(e.pipelined());
  Trajectory t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    std::vector<Tensor> inputs, targets;
    for (int64_t m = 0; m < kMicro; ++m) {
      const auto [x, y] = micro_batch(tokens, m, grid.dp_rank(), l.dp);
      inputs.push_back(x), targets.push_back(y);
    }
    const Tensor losses = e.forward_backward(inputs, targets);
    const engine::StepResult r = e.step();
    BOOST_REQUIRE(!r.skipped);
    Tensor sum = Tensor::full({1}, ops::sum(losses).item(), DType::f64);
    grid.dp()->all_reduce(sum)->wait();
    t.losses.push_back(sum.item() / double(kMicro * l.dp));
    const int live = e.pipeline()->peak_live();
    // 1F1B and ZB-H1 keep at most p micro-batches alive on a stage; GPipe all of them.
    if (l.schedule == "gpipe") BOOST_TEST(live == kMicro);
    if (l.schedule == "1f1b" || l.schedule == "zb_h1") BOOST_TEST(live <= std::min<int64_t>(l.pp, kMicro));
  }
  e.gather_parameters();
  const auto splits = e.model().named_splits();
  const auto params = e.model().named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    const nn::TensorSplit& s = splits[i].second;
    if (!s.is_split()) {
      t.params[name] = ops::clone(p);
      continue;
    }
    Tensor global = Tensor::zeros(s.global_shape(p.shape()));
    nn::place_local_part(global, p, s);
    grid.tp()->all_reduce(global)->wait();  // the parts are disjoint
    t.params[name] = global;
  }
  e.release_parameters();
  return t;
}

void check_equal(const Trajectory& run, const Trajectory& ref, const Layout& l) {
  BOOST_TEST_CONTEXT(str(l)) {
    for (size_t i = 0; i < ref.losses.size(); ++i)
      BOOST_TEST(std::abs(run.losses[i] - ref.losses[i]) / ref.losses[i] < 1e-5, "step " << i);
    BOOST_TEST(!run.params.empty());
    for (const auto& [name, p] : run.params) {
      BOOST_REQUIRE_MESSAGE(ref.params.count(name), "no parameter " << name << " in the single-process model");
      // Against the model's scale: some elements (the key biases, whose gradient is zero
      // but for rounding) are noise of their own.
      BOOST_TEST(test::max_abs_diff(p, ref.params.at(name)) / ref.scale < 1e-5, name);
    }
  }
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
  for (const Layout& l : runs) check_equal(pipelined(l), ref, l);
}
