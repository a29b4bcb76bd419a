// DeepSpeed's learning-rate schedules against the rates (and OneCycle's betas) DeepSpeed's own
// classes give over 40 steps, past each schedule's end, for every scheduler type over a
// spread of parameters (tests/data/deepspeed_schedules_reference.json, written by
// tests/reference/deepspeed_schedules_reference.py), each built from its config keys with
// DeepSpeed's defaults as a run builds it. Also hand-computed points, the config keys, the
// betas reaching the optimizer, and the errors.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>

#include "config/config.h"
#include "engine/engine.h"
#include "optim/deepspeed_schedules.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_deepspeed_schedules)

using namespace triad;
namespace ds = optim::deepspeed;

namespace {

bool mentions(const std::vector<std::string>& notices, const std::string& key) {
  return std::any_of(notices.begin(), notices.end(),
                     [&](const std::string& n) { return n.find(key) != std::string::npos; });
}

// The parameters of an Engine after `steps` steps on one fixed batch of 4 sequences.
std::vector<std::vector<double>> parameters_after(const engine::TrainConfig& c, int steps) {
  engine::Engine e(c);
  std::vector<int64_t> tokens(4 * 9);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int64_t(i * 7 % 16);
  const Tensor t = Tensor::from_vector(tokens, {4, 9});
  const Tensor inputs = ops::contiguous(ops::narrow(t, 1, 0, 8)), targets = ops::contiguous(ops::narrow(t, 1, 1, 8));
  for (int s = 0; s < steps; ++s) {
    e.backward(e.forward(inputs, targets));
    e.step();
  }
  std::vector<std::vector<double>> out;
  for (const Tensor& p : e.model().parameters()) out.push_back(p.to_vector<double>());
  return out;
}

bool close(double got, double want) { return std::fabs(got - want) <= 1e-9 * std::fabs(want); }

}  // namespace

// Each reference case as a config (its optimizer, scheduler type and params, DeepSpeed's
// defaults for the params it leaves out): the Engine's rate, and betas, of steps 0..39.
BOOST_AUTO_TEST_CASE(every_schedule_equals_deepspeeds_classes) {
  std::ifstream in(test::data_path("deepspeed_schedules_reference.json"));
  BOOST_TEST_REQUIRE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  const int64_t steps = ref["steps"].get<int64_t>();
  std::set<std::string> types;
  for (const nlohmann::json& c : ref["cases"]) {
    const std::string name = c["name"].get<std::string>();
    types.insert(c["type"].get<std::string>());
    const nlohmann::json config = {
        {"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
        {"train_batch_size", 4},
        {"steps", steps},
        {"optimizer", {{"type", c["optimizer"]["type"]}, {"params", {{"lr", c["optimizer"]["lr"]}}}}},
        {"scheduler", {{"type", c["type"]}, {"params", c["params"]}}}};
    const engine::Engine e(engine::parse_config(config));
    const std::vector<double> lr = c["lr"].get<std::vector<double>>();
    BOOST_TEST_REQUIRE(int64_t(lr.size()) == steps);
    for (int64_t s = 0; s < steps; ++s)
      BOOST_TEST(close(e.lr_at(s), lr[size_t(s)]),
                 name << ", step " << s << ": " << e.lr_at(s) << " vs " << lr[size_t(s)]);
    if (!c.contains("betas")) {
      BOOST_TEST(!e.betas_at(0).has_value(), name << ": betas");
      continue;
    }
    const auto betas = c["betas"].get<std::vector<std::vector<double>>>();
    for (int64_t s = 0; s < steps; ++s) {
      const std::optional<optim::AdamBetas> b = e.betas_at(s);
      BOOST_TEST_REQUIRE(b.has_value(), name << ", step " << s << ": no betas");
      BOOST_TEST((close(b->beta1, betas[size_t(s)][0]) && close(b->beta2, betas[size_t(s)][1])),
                 name << ", step " << s << ": (" << b->beta1 << ", " << b->beta2 << ") vs (" << betas[size_t(s)][0]
                      << ", " << betas[size_t(s)][1] << ")");
    }
  }
  BOOST_TEST(ref["cases"].size() > 25u);
  BOOST_TEST(
      (types == std::set<std::string>{"LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}));
}

// Hand-computed points of each shape, past the end too.
BOOST_AUTO_TEST_CASE(hand_computed_points) {
  // WarmupDecayLR: step 0 and 1 take min (i = -1, then log 1 = 0); the linear warmup's step
  // 21 (i = 20) is half way; the decay reaches min at i = total and stays.
  const ds::WarmupDecayLR linear(0.0, 1.0, 40, 100, ds::WarmupType::linear);
  BOOST_TEST(linear.lr_at(0) == 0.0);
  BOOST_TEST(linear.lr_at(1) == 0.0);
  BOOST_TEST(linear.lr_at(21) == 0.5);
  BOOST_TEST(linear.lr_at(41) == 1.0);   // i = 40: (100 - 40) / 60
  BOOST_TEST(linear.lr_at(71) == 0.5);   // i = 70: 30 / 60
  BOOST_TEST(linear.lr_at(101) == 0.0);  // i = 100
  BOOST_TEST(linear.lr_at(150) == 0.0);
  BOOST_TEST(ds::WarmupLR(0.0, 1.0, 1, ds::WarmupType::log).lr_at(2) == 1.0);  // W is at least 2

  // WarmupCosineLR: the cosine's midpoint (i - W + 1 = (T - W) / 2) is lr (1 + cmin) / 2;
  // from T on it holds lr cmin (a 3-step schedule's step 5: 6e-4 x 0.1).
  const ds::WarmupCosineLR mid(1.0, 110, 0.0, 10, 0.2, ds::WarmupType::linear);
  BOOST_TEST(std::fabs(mid.lr_at(60) - 0.6) < 1e-15);  // i = 59: (59 - 10 + 1) / 100 = 1/2
  BOOST_TEST(std::fabs(mid.lr_at(110) - 0.2) < 1e-15);  // i = 109: the end
  BOOST_TEST(std::fabs(mid.lr_at(160) - 0.2) < 1e-15);  // past it
  BOOST_TEST(mid.lr_at(0) == 0.0);
  const ds::WarmupCosineLR short_schedule(6e-4, 3, 0.0, 2, 0.1, ds::WarmupType::log);
  BOOST_TEST(std::fabs(short_schedule.lr_at(5) - 6e-5) < 1e-18);
  // total_num_steps at or below the warmup: cmin right after it.
  BOOST_TEST(std::fabs(ds::WarmupCosineLR(1.0, 4, 0.0, 10, 0.3, ds::WarmupType::linear).lr_at(11) - 0.3) < 1e-15);

  // OneCycle: a 10 + 10 cycle peaks at step 10 (i = 9, x = 1/2), where beta1 is lowest.
  const ds::OneCycle cycle(0.0, 1.0, 0.0, ds::CycleShape{10, 10}, 0, ds::MomentumCycle{});
  BOOST_TEST(std::fabs(cycle.lr_at(10) - 1.0) < 1e-15);
  BOOST_TEST(std::fabs(cycle.lr_at(5) - 0.5) < 1e-15);
  BOOST_TEST(std::fabs(cycle.lr_at(15) - 0.5) < 1e-15);
  BOOST_TEST(cycle.betas_at(0)->beta1 == 0.8);                     // i = -1: min_mom, with the lr's min
  BOOST_TEST(std::fabs(cycle.betas_at(1)->beta1 - 0.89) < 1e-15);  // i = 0: f = 1/10
  BOOST_TEST(std::fabs(cycle.betas_at(5)->beta1 - 0.85) < 1e-15);
  BOOST_TEST(std::fabs(cycle.betas_at(10)->beta1 - 0.8) < 1e-15);
  BOOST_TEST(std::fabs(cycle.betas_at(15)->beta1 - 0.85) < 1e-15);
  BOOST_TEST(std::fabs(cycle.betas_at(20)->beta1 - 0.9) < 1e-15);  // i = 19: the cycle's end
  BOOST_TEST(std::fabs(cycle.betas_at(30)->beta1 - 0.9) < 1e-15);  // no decay: max_mom
  BOOST_TEST(!ds::OneCycle(0.0, 1.0, 0.0, ds::CycleShape{10, 10}, 0).betas_at(3).has_value());
  // Stairs: 2 on a rise of 10 steps hold 0 while b = i + 1 < 5, then 1/2 until the peak
  // at b = 10; the fall (its stair count the rise's) steps down from b = 11.
  const ds::OneCycle stairs(0.0, 1.0, 0.0, ds::CycleShape{10, 10, 2}, 0);
  for (int64_t s : {0, 1, 4}) BOOST_TEST(stairs.lr_at(s) == 0.0, "step " << s);
  for (int64_t s : {5, 9, 11}) BOOST_TEST(stairs.lr_at(s) == 0.5, "step " << s);
  BOOST_TEST(stairs.lr_at(10) == 1.0);
  // A second step size of 0: a rise over S1 steps that wraps to min before the peak.
  const ds::OneCycle saw(0.0, 1.0, 0.0, ds::CycleShape{4, 0}, 0);
  BOOST_TEST(saw.lr_at(3) == 0.75);  // i = 2: x = 3/4
  BOOST_TEST(saw.lr_at(4) == 0.0);   // i = 3: b = 4 = S, x = 0
  BOOST_TEST(saw.lr_at(5) == 0.0);   // i = 4: after the cycle, min

  // LRRangeTest: min (1 + rate n), n floored by the staircase.
  BOOST_TEST(std::fabs(ds::LRRangeTest(1e-3, 7, 2.5, false).lr_at(15) - 1e-3 * (1 + 2.5 * 15 / 7.0)) < 1e-18);
  BOOST_TEST(std::fabs(ds::LRRangeTest(1e-3, 7, 2.5, true).lr_at(15) - 1e-3 * 6.0) < 1e-18);
}

// DeepSpeed's engine steps its scheduler only after a step that did not overflow: an fp16
// step skipped gives the next step the same rate. A loss scale of 2^24 overflows f16's
// gradients until hysteresis 1 has halved it enough.
BOOST_AUTO_TEST_CASE(a_skipped_fp16_step_does_not_advance_the_schedule) {
  const nlohmann::json j = {
      {"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
      {"train_batch_size", 4},
      {"steps", 40},
      {"fp16", {{"enabled", true}, {"initial_scale_power", 24}, {"hysteresis", 1}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}},
      {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 30}, {"warmup_type", "linear"}}}}}};
  engine::Engine e(engine::parse_config(j));
  std::vector<int64_t> tokens(4 * 9);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int64_t(i * 7 % 16);
  const Tensor t = Tensor::from_vector(tokens, {4, 9});
  const Tensor inputs = ops::contiguous(ops::narrow(t, 1, 0, 8)), targets = ops::contiguous(ops::narrow(t, 1, 1, 8));
  int64_t taken = 0, skipped = 0;
  for (int s = 0; s < 40; ++s) {
    e.backward(e.forward(inputs, targets));
    const engine::StepResult r = e.step();
    BOOST_TEST(r.lr == e.lr_at(taken), "step " << s << ": " << r.lr << " vs " << e.lr_at(taken));
    if (r.skipped)
      ++skipped;
    else
      ++taken;
  }
  BOOST_TEST(skipped > 0);
  BOOST_TEST(taken > 30);
  BOOST_TEST(e.global_step() == 40);
}

BOOST_AUTO_TEST_CASE(config_keys_with_deepspeeds_defaults) {
  nlohmann::json j = {{"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
                      {"train_batch_size", 4},
                      {"steps", 50},
                      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}}};
  // WarmupLR with no params: DeepSpeed's 0 -> the optimizer's lr over 1000 steps, log
  // warmup; WarmupDecayLR's warmup_max_lr is 0.001.
  j["scheduler"] = {{"type", "WarmupLR"}};
  engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.scheduler.warmup_num_steps == 1000);
  BOOST_TEST(c.scheduler.warmup_type == "log");
  BOOST_TEST(c.scheduler.warmup_max_lr == 0.01);
  const engine::Engine e(c);
  BOOST_TEST(std::fabs(e.lr_at(11) - 0.01 * std::log(11.0) / std::log(1000.0)) < 1e-15);
  j["scheduler"]["type"] = "WarmupDecayLR";
  BOOST_TEST(engine::parse_config(j).scheduler.warmup_max_lr == 0.001);
  j["scheduler"]["params"]["warmup_num_steps"] = 0;
  test::check_error([&] { engine::parse_config(j); }, {"scheduler.params.warmup_num_steps", ">= 1", "0"});
  // WarmupCosineLR: the optimizer's lr is the peak; total_num_steps defaults to the run's.
  j["scheduler"] = {{"type", "WarmupCosineLR"},
                    {"params", {{"warmup_num_steps", 10}, {"warmup_type", "linear"}, {"warmup_min_ratio", 0.1}}}};
  c = engine::parse_config(j);
  BOOST_TEST(c.scheduler.total_num_steps == 50);
  BOOST_TEST(c.scheduler.cos_min_ratio == 0.0001);
  BOOST_TEST(std::fabs(engine::Engine(c).lr_at(6) - 0.01 * (0.1 + 0.5 * 0.9)) < 1e-15);  // i = 5 of 10

  j["scheduler"] = {{"type", "WarmupDecayLR"}, {"params", {{"warmup_type", "cosine"}}}};
  test::check_error([&] { engine::parse_config(j); }, {"scheduler.params.warmup_type", "log", "linear", "cosine"});
  // OneCycle cycles Adam's beta1 by default, between DeepSpeed's 0.8 and 0.9, with beta2 0.99.
  j["scheduler"] = {{"type", "OneCycle"}, {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}}}};
  c = engine::parse_config(j);
  BOOST_TEST(c.scheduler.cycle_momentum);
  BOOST_TEST(c.scheduler.cycle_min_mom == 0.8);
  BOOST_TEST(c.scheduler.cycle_max_mom == 0.9);
  BOOST_TEST(c.scheduler.decay_mom_rate == 0.0);
  BOOST_TEST(mentions(c.notices, "optimizer.params.betas"));
  {
    const engine::Engine e(c);
    BOOST_TEST(e.betas_at(0)->beta1 == 0.8);
    BOOST_TEST(e.betas_at(0)->beta2 == 0.99);
    BOOST_TEST(std::fabs(e.betas_at(1)->beta1 - (0.9 - 0.1 / 2000)) < 1e-15);  // i = 0 of a 2000 + 2000 cycle
  }
  j["scheduler"]["params"]["cycle_momentum"] = false;
  BOOST_TEST(!engine::Engine(engine::parse_config(j)).betas_at(0).has_value());
  {  // The step's betas reach ZeRO's Adam: step 0 with the schedule's (0.8, 0.99) over the
     // config's betas is the step of betas (0.8, 0.99) without momentum cycling; step 1 (beta1
     // 0.89995 against 0.8) is not.
    nlohmann::json cycled = j, fixed = j;
    cycled["scheduler"]["params"]["cycle_momentum"] = true;
    cycled["optimizer"]["params"]["betas"] = {0.5, 0.5};
    fixed["optimizer"]["params"]["betas"] = {0.8, 0.99};
    const engine::TrainConfig a = engine::parse_config(cycled), b = engine::parse_config(fixed);
    BOOST_TEST((parameters_after(a, 1) == parameters_after(b, 1)));
    BOOST_TEST((parameters_after(a, 2) != parameters_after(b, 2)));
  }
  j["scheduler"]["params"] = {{"cycle_min_lr", 1e-4},
                              {"cycle_max_lr", 1e-3},
                              {"cycle_min_mom", 0.85},
                              {"cycle_max_mom", 0.95},
                              {"decay_mom_rate", 0.1}};
  c = engine::parse_config(j);
  BOOST_TEST(c.scheduler.cycle_min_mom == 0.85);
  BOOST_TEST(c.scheduler.cycle_max_mom == 0.95);
  BOOST_TEST(c.scheduler.decay_mom_rate == 0.1);
  j["scheduler"]["params"]["cycle_min_mom"] = 1.5;
  test::check_error([&] { engine::parse_config(j); }, {"scheduler.params.cycle_min_mom", "1.5"});
  {  // SGD has no betas: DeepSpeed's OneCycle cycles its rate alone, and says so
    nlohmann::json sgd = j;
    sgd["scheduler"]["params"].erase("cycle_min_mom");
    sgd["optimizer"] = {{"type", "SGD"}, {"params", {{"lr", 0.01}}}};
    c = engine::parse_config(sgd);
    BOOST_TEST(!c.scheduler.cycle_momentum);
    BOOST_TEST(mentions(c.notices, "scheduler.params.cycle_momentum"));
    BOOST_TEST(!engine::Engine(c).betas_at(0).has_value());
  }
  j["scheduler"] = {{"type", "OneCycle"}, {"params", {{"cycle_max_lr", 1e-3}, {"cycle_momentum", false}}}};
  test::check_error([&] { engine::parse_config(j); }, {"OneCycle", "cycle_min_lr"});
  // total_num_steps below the warmup: accepted with a notice (DeepSpeed warns), the floor
  // right after the warmup.
  j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", 60}, {"cos_min_ratio", 0.5}}}};
  c = engine::parse_config(j);
  BOOST_TEST(mentions(c.notices, "scheduler.params.total_num_steps (50) is below warmup_num_steps (60"));
  BOOST_TEST(engine::Engine(c).lr_at(61) == 0.01 * 0.5);
  // OneCycle's stair counts and a null second step size (DeepSpeed's None: the first's).
  j["scheduler"] = {{"type", "OneCycle"},
                    {"params",
                     {{"cycle_min_lr", 1e-4},
                      {"cycle_max_lr", 1e-3},
                      {"cycle_second_step_size", nullptr},
                      {"cycle_first_stair_count", 3},
                      {"cycle_second_stair_count", nullptr}}}};
  c = engine::parse_config(j);
  BOOST_TEST(!c.scheduler.cycle_second_step_size.has_value());
  BOOST_TEST(c.scheduler.cycle_first_stair_count == 3);
  BOOST_TEST(!c.scheduler.cycle_second_stair_count.has_value());
  j["scheduler"]["params"]["cycle_second_step_size"] = 0;
  BOOST_TEST(*engine::parse_config(j).scheduler.cycle_second_step_size == 0);
  j["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 0.1}, {"last_batch_iteration", 5}}}};
  test::check_error([&] { engine::parse_config(j); }, {"last_batch_iteration", "-1"});
  j["scheduler"] = {{"type", "CosineLR"}};
  test::check_error([&] { engine::parse_config(j); }, {"scheduler.type", "WarmupDecayLR"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_deepspeed_schedules
