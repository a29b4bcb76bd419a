// DeepSpeed's learning-rate schedules (deepspeed.runtime.lr_schedules), with its parameter
// names, defaults and formulas, for configs written for DeepSpeed.
//
// Step indexing. DeepSpeed's schedule holds a batch iteration i, -1 when built, and steps it
// after each optimizer step; the rate of optimizer step s (0-based) is therefore its value at
// i = s - 1, and the first step takes the rate the schedule set when built. Each class
// below gives lr_at(s) = rate(i = s - 1) with these rates (W = max(2, warmup_num_steps),
// warmup_num_steps >= 1; γ(i) = log(i + 1) / log(W) for warmup_type "log", i / W for
// "linear"):
//
//   WarmupLR        i < W: min + (max − min) γ(i); then max.                 i = −1: min
//   WarmupDecayLR   i < W: as WarmupLR; then min + (max − min) ·
//                   max(0, (T − i) / max(1, T − W)).                         i = −1: min
//   WarmupCosineLR  lr · r(i), lr the optimizer's: i < W: r = wmin + (1 − wmin) γ(i); then
//                   p = min(1, (i − W + 1) / max(1, T − W)) and
//                   r = max(0, cmin + (1 − cmin)(1 + cos(π p)) / 2): cmin from T on (and
//                   right after the warmup when T <= W).                     i = −1: 0
//   OneCycle        i < S = S1 + S2: b = i + 1, x = b/S − floor(b/S), f = x / (S1/S) when
//                   x <= S1/S, else (x − 1) / (S1/S − 1); min + (max − min) f. With a stair
//                   count n (n1 on the side x <= S1/S, else n2): f = floor(k)/n instead,
//                   k = c n / S1 when c = b mod S <= S1, else (S − c) n / S2. After the
//                   cycle: min / (1 + decay_lr_rate (i − S + 1) / decay_step_size), or min
//                   when either is 0.                                        i = −1: min
//   LRRangeTest     min (1 + rate · n), n = (i + 1) / size, floored when staircase.
//                                                                            i = −1: min
//
// OneCycle with cycle_momentum (DeepSpeed's default) also sets Adam's betas to (β1, 0.99),
// replacing the optimizer's β2 as DeepSpeed does; β1 moves opposite to the rate, with f as
// above: i < S: max_mom − (max_mom − min_mom) f. After the cycle: max_mom (1 +
// decay_mom_rate (i − S + 1) / decay_step_size), or max_mom when either is 0.  i = −1: min_mom
//
// tests/data/deepspeed_schedules_reference.json holds the rates (and betas) DeepSpeed's own
// classes give over a spread of parameters; these classes equal them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "optim/schedule.h"

namespace triad::optim::deepspeed {

// "log" or "linear" (DeepSpeed's warmup_type; its default is "log").
enum class WarmupType { log, linear };
WarmupType parse_warmup_type(const std::string& name);  // Error naming the value otherwise

// The schedule's rate at batch iteration i (i >= -1), as DeepSpeed computes it.
class IterationSchedule : public LRSchedule {
 public:
  double lr_at(int64_t step) const override { return rate(step - 1); }
  virtual double rate(int64_t i) const = 0;
};

class WarmupLR : public IterationSchedule {
 public:
  WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps, WarmupType type);
  double rate(int64_t i) const override;

 protected:
  double warmup_gamma(int64_t i) const;  // γ(i), i < W
  double min_, max_;
  int64_t warmup_;
  WarmupType type_;
};

class WarmupDecayLR : public WarmupLR {
 public:
  WarmupDecayLR(double min_lr, double max_lr, int64_t warmup_num_steps, int64_t total_num_steps, WarmupType type);
  double rate(int64_t i) const override;

 private:
  int64_t total_;
};

class WarmupCosineLR : public IterationSchedule {
 public:
  WarmupCosineLR(double lr, int64_t total_num_steps, double warmup_min_ratio, int64_t warmup_num_steps,
                 double cos_min_ratio, WarmupType type);
  double rate(int64_t i) const override;

 private:
  double lr_, warmup_min_ratio_, cos_min_ratio_;
  int64_t total_, warmup_;
  WarmupType type_;
};

// OneCycle's cycle_min_mom, cycle_max_mom and decay_mom_rate, with DeepSpeed's defaults.
struct MomentumCycle {
  double min_mom = 0.8, max_mom = 0.9, decay_mom_rate = 0.0;
};

// OneCycle's cycle shape: the two step sizes (S2 none: S1's; 0 makes a sawtooth of S1
// steps) and stair counts (0: continuous; n2 none: n1's), with DeepSpeed's defaults.
struct CycleShape {
  int64_t first_step_size = 2000;
  std::optional<int64_t> second_step_size;
  int64_t first_stair_count = 0;
  std::optional<int64_t> second_stair_count;
};

class OneCycle : public IterationSchedule {
 public:
  // momentum: cycle Adam's β1 (none: the rate alone).
  OneCycle(double min_lr, double max_lr, double decay_lr_rate, const CycleShape& shape, int64_t decay_step_size,
           std::optional<MomentumCycle> momentum = std::nullopt);
  double rate(int64_t i) const override;
  std::optional<AdamBetas> betas_at(int64_t step) const override;

 private:
  double cycle_fraction(int64_t i) const;  // f, 0 <= i < S
  double momentum(int64_t i) const;        // β1 at batch iteration i
  double min_, max_, decay_rate_;
  double first_, second_, total_;
  int64_t first_stairs_, second_stairs_;
  int64_t decay_step_size_;
  std::optional<MomentumCycle> momentum_;
};

class LRRangeTest : public IterationSchedule {
 public:
  LRRangeTest(double min_lr, int64_t step_size, double step_rate, bool staircase);
  double rate(int64_t i) const override;

 private:
  double min_, step_rate_;
  int64_t step_size_;
  bool staircase_;
};

}  // namespace triad::optim::deepspeed
