// DeepSpeed's learning-rate schedules over two total lengths of steps, against the formulas
// of DeepSpeed's documentation evaluated here the way DeepSpeed runs them: a batch
// iteration that starts at -1 with the rate the schedule sets when built, and steps after
// each optimizer step; likewise OneCycle's momentum (Adam's beta1). Also hand-computed
// points, the config keys with DeepSpeed's defaults, the betas reaching the optimizer, and
// the errors.
#define BOOST_TEST_MODULE deepspeed_schedules
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "config/config.h"
#include "engine/engine.h"
#include "optim/deepspeed_schedules.h"
#include "support/check.h"

using namespace triad;
namespace ds = optim::deepspeed;

namespace {

// The rate each optimizer step s in [0, steps) gets from a schedule whose rate at batch
// iteration i is `at(i)`: the optimizer steps with the current rate, then the schedule steps.
std::vector<double> as_deepspeed_runs(const std::function<double(int64_t)>& at, int64_t steps) {
  std::vector<double> out;
  int64_t iteration = -1;  // last_batch_iteration when built
  for (int64_t s = 0; s < steps; ++s) {
    out.push_back(at(iteration));  // optimizer.step() with the rate in the param groups
    ++iteration;                   // lr_scheduler.step()
  }
  return out;
}

void expect_schedule(const optim::LRSchedule& schedule, const std::vector<double>& want, const std::string& what) {
  for (size_t s = 0; s < want.size(); ++s)
    BOOST_TEST(std::fabs(schedule.lr_at(int64_t(s)) - want[s]) <= 1e-12 * std::max(1.0, std::fabs(want[s])),
               what << ", step " << s << ": " << schedule.lr_at(int64_t(s)) << " vs " << want[s]);
}

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

// DeepSpeed's OneCycle with cycle_momentum sets each group's betas to (momentum, 0.99).
void expect_betas(const optim::LRSchedule& schedule, const std::vector<double>& beta1, const std::string& what) {
  for (size_t s = 0; s < beta1.size(); ++s) {
    const std::optional<optim::AdamBetas> b = schedule.betas_at(int64_t(s));
    BOOST_TEST_REQUIRE(b.has_value(), what << ", step " << s << ": no betas");
    BOOST_TEST(std::fabs(b->beta1 - beta1[s]) <= 1e-12,
               what << ", step " << s << ": " << b->beta1 << " vs " << beta1[s]);
    BOOST_TEST(b->beta2 == 0.99, what << ", step " << s);
  }
}

// Documentation: gamma = log(i + 1) / log(W) (log) or i / W (linear) while i < W, W >= 2.
double warmup_fraction(int64_t i, int64_t w, bool log) {
  w = std::max<int64_t>(w, 2);
  return log ? std::log(double(i) + 1.0) / std::log(double(w)) : double(i) / double(w);
}

}  // namespace

BOOST_AUTO_TEST_CASE(warmup_lr_and_warmup_decay_lr) {
  const double lo = 1e-5, hi = 3e-4;
  const int64_t w = 40, total = 100;
  for (bool log : {true, false}) {
    const ds::WarmupType type = log ? ds::WarmupType::log : ds::WarmupType::linear;
    const auto warmup = [&](int64_t i) {
      if (i < 0) return lo;  // min_lrs before the first step
      return lo + (hi - lo) * (i < w ? warmup_fraction(i, w, log) : 1.0);
    };
    expect_schedule(ds::WarmupLR(lo, hi, w, type), as_deepspeed_runs(warmup, 2 * total), "WarmupLR");
    const auto decay = [&](int64_t i) {
      if (i < 0) return lo;
      const double g = i < w ? warmup_fraction(i, w, log)
                             : std::max(0.0, double(total - i) / std::max(1.0, double(total - w)));
      return lo + (hi - lo) * g;
    };
    expect_schedule(ds::WarmupDecayLR(lo, hi, w, total, type), as_deepspeed_runs(decay, 2 * total), "WarmupDecayLR");
  }
  // Hand-computed: step 0 and 1 take min (i = -1, then log 1 = 0); the linear warmup's step
  // 21 (i = 20) is half way; the decay reaches min at i = total and stays.
  const ds::WarmupDecayLR linear(0.0, 1.0, 40, 100, ds::WarmupType::linear);
  BOOST_TEST(linear.lr_at(0) == 0.0);
  BOOST_TEST(linear.lr_at(1) == 0.0);
  BOOST_TEST(linear.lr_at(21) == 0.5);
  BOOST_TEST(linear.lr_at(41) == 1.0);           // i = 40: (100 - 40) / 60
  BOOST_TEST(linear.lr_at(71) == 0.5);           // i = 70: 30 / 60
  BOOST_TEST(linear.lr_at(101) == 0.0);          // i = 100
  BOOST_TEST(linear.lr_at(150) == 0.0);
  BOOST_TEST(ds::WarmupLR(0.0, 1.0, 1, ds::WarmupType::log).lr_at(2) == 1.0);  // W is at least 2
}

BOOST_AUTO_TEST_CASE(warmup_cosine_lr) {
  const double lr = 6e-4;
  for (bool log : {true, false})
    for (auto [w, total, wmin, cmin] : std::vector<std::tuple<int64_t, int64_t, double, double>>{
             {10, 100, 0.0, 0.0001}, {30, 64, 0.1, 0.1}, {2, 5, 0.5, 0.0}}) {
      const auto at = [&](int64_t i) {
        if (i < 0) return 0.0;  // DeepSpeed's WarmupCosineLR starts at 0
        if (i < std::max<int64_t>(w, 2)) return lr * (wmin + warmup_fraction(i, w, log) * (1 - wmin));
        const double ww = double(std::max<int64_t>(w, 2));
        const double c = (1 + std::cos(M_PI * (double(i) - ww + 1) / (double(total) - ww))) / 2;
        return lr * std::max(0.0, cmin + (1 - cmin) * c);
      };
      expect_schedule(ds::WarmupCosineLR(lr, total, wmin, w, cmin, log ? ds::WarmupType::log : ds::WarmupType::linear),
                      as_deepspeed_runs(at, 2 * total), "WarmupCosineLR");
    }
  // Hand-computed: the cosine's midpoint (i - W + 1 = (T - W) / 2) is lr (1 + cmin) / 2.
  const ds::WarmupCosineLR mid(1.0, 110, 0.0, 10, 0.2, ds::WarmupType::linear);
  BOOST_TEST(std::fabs(mid.lr_at(60) - 0.6) < 1e-15);  // i = 59: (59 - 10 + 1) / 100 = 1/2
  BOOST_TEST(std::fabs(mid.lr_at(110) - 0.2) < 1e-15);  // i = 109: the end
  BOOST_TEST(mid.lr_at(0) == 0.0);
}

BOOST_AUTO_TEST_CASE(one_cycle_and_lr_range_test) {
  for (auto [first, second, decay_rate, decay_size] :
       std::vector<std::tuple<int64_t, int64_t, double, int64_t>>{{10, 0, 0.0, 0}, {8, 12, 0.5, 4}, {5, 3, 1.0, 1}}) {
    const double lo = 1e-4, hi = 1e-2;
    const double s2 = double(second > 0 ? second : first), size = double(first) + s2, ratio = double(first) / size;
    const auto at = [&](int64_t i) {
      if (i < 0) return lo;
      if (double(i) < size) {
        const double b = double(i + 1);
        const double cycle = std::floor(1 + b / size), x = 1 + b / size - cycle;
        return lo + (hi - lo) * (x <= ratio ? x / ratio : (x - 1) / (ratio - 1));
      }
      if (decay_size == 0 || decay_rate == 0.0) return lo;
      return lo / (1 + decay_rate * (double(i) - size + 1) / double(decay_size));
    };
    expect_schedule(ds::OneCycle(lo, hi, decay_rate, first, second, decay_size), as_deepspeed_runs(at, 2 * int64_t(size)),
                    "OneCycle");
  }
  // Momentum (cycle_momentum): min_mom when built, then max_mom - (max_mom - min_mom) f in the
  // cycle, and max_mom (1 + decay_mom_rate (i - S + 1) / decay_step_size) after it.
  for (auto [first, second, decay_size] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{10, 0, 0}, {8, 12, 4}, {5, 3, 1}})
    for (auto [min_mom, max_mom, decay_mom] :
         std::vector<std::tuple<double, double, double>>{{0.8, 0.9, 0.0}, {0.85, 0.95, 0.01}}) {
      const double size = double(first) + double(second > 0 ? second : first), ratio = double(first) / size;
      const auto mom = [&](int64_t i) {
        if (i < 0) return min_mom;
        if (double(i) < size) {
          const double b = double(i + 1);
          const double cycle = std::floor(1 + b / size), x = 1 + b / size - cycle;
          return max_mom - (max_mom - min_mom) * (x <= ratio ? x / ratio : (x - 1) / (ratio - 1));
        }
        if (decay_size == 0 || decay_mom == 0.0) return max_mom;
        return max_mom * (1 + decay_mom * (double(i) - size + 1) / double(decay_size));
      };
      expect_betas(
          ds::OneCycle(1e-4, 1e-2, 0.5, first, second, decay_size, ds::MomentumCycle{min_mom, max_mom, decay_mom}),
          as_deepspeed_runs(mom, 2 * int64_t(size)), "OneCycle momentum");
    }
  // Hand-computed: a 10 + 10 cycle peaks at step 10 (i = 9, x = 1/2), where beta1 is lowest.
  const ds::OneCycle cycle(0.0, 1.0, 0.0, 10, 10, 0, ds::MomentumCycle{});
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
  BOOST_TEST(!ds::OneCycle(0.0, 1.0, 0.0, 10, 10, 0).betas_at(3).has_value());

  for (bool staircase : {false, true}) {
    const auto at = [&](int64_t i) {
      if (i < 0) return 1e-3;
      const double n = double(i + 1) / 7.0;
      return 1e-3 * (1 + 2.5 * (staircase ? std::floor(n) : n));
    };
    expect_schedule(ds::LRRangeTest(1e-3, 7, 2.5, staircase), as_deepspeed_runs(at, 60), "LRRangeTest");
  }
}

BOOST_AUTO_TEST_CASE(config_keys_with_deepspeeds_defaults) {
  nlohmann::json j = {{"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
                      {"train_batch_size", 4},
                      {"steps", 50},
                      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}}};
  // WarmupLR with no params: DeepSpeed's 0 -> 0.001 over 1000 steps, log warmup.
  j["scheduler"] = {{"type", "WarmupLR"}};
  engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.scheduler.warmup_num_steps == 1000);
  BOOST_TEST(c.scheduler.warmup_type == "log");
  BOOST_TEST(c.scheduler.warmup_max_lr == 0.001);
  const engine::Engine e(c);
  BOOST_TEST(std::fabs(e.lr_at(11) - 0.001 * std::log(11.0) / std::log(1000.0)) < 1e-15);
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
  j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", 60}}}};
  test::check_error([&] { engine::parse_config(j); }, {"WarmupCosineLR", "total_num_steps (50)", "60"});
  j["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 0.1}, {"last_batch_iteration", 5}}}};
  test::check_error([&] { engine::parse_config(j); }, {"last_batch_iteration", "-1"});
  j["scheduler"] = {{"type", "CosineLR"}};
  test::check_error([&] { engine::parse_config(j); }, {"scheduler.type", "WarmupDecayLR"});
}
