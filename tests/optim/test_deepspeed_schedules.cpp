// DeepSpeed's learning-rate schedules over two total lengths of steps, against the formulas
// of DeepSpeed's documentation evaluated here the way DeepSpeed runs them: a batch
// iteration that starts at -1 with the rate the schedule sets when built, and steps after
// each optimizer step. Also hand-computed points, the config keys with DeepSpeed's defaults,
// and the errors.
#define BOOST_TEST_MODULE deepspeed_schedules
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>

#include "engine/config.h"
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
  // Hand-computed: a 10 + 10 cycle peaks at step 10 (i = 9, x = 1/2).
  const ds::OneCycle cycle(0.0, 1.0, 0.0, 10, 10, 0);
  BOOST_TEST(std::fabs(cycle.lr_at(10) - 1.0) < 1e-15);
  BOOST_TEST(std::fabs(cycle.lr_at(5) - 0.5) < 1e-15);
  BOOST_TEST(std::fabs(cycle.lr_at(15) - 0.5) < 1e-15);

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
  j["scheduler"] = {{"type", "OneCycle"}, {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}}}};
  test::check_error([&] { engine::parse_config(j); }, {"cycle_momentum", "beta1"});
  j["scheduler"]["params"]["cycle_momentum"] = false;
  BOOST_CHECK_NO_THROW(engine::parse_config(j));
  j["scheduler"] = {{"type", "OneCycle"}, {"params", {{"cycle_max_lr", 1e-3}, {"cycle_momentum", false}}}};
  test::check_error([&] { engine::parse_config(j); }, {"OneCycle", "cycle_min_lr"});
  j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", 60}}}};
  test::check_error([&] { engine::parse_config(j); }, {"WarmupCosineLR", "total_num_steps (50)", "60"});
  j["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 0.1}, {"last_batch_iteration", 5}}}};
  test::check_error([&] { engine::parse_config(j); }, {"last_batch_iteration", "-1"});
  j["scheduler"] = {{"type", "CosineLR"}};
  test::check_error([&] { engine::parse_config(j); }, {"scheduler.type", "WarmupDecayLR"});
}
