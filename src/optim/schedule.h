// Learning-rate schedules: the rate for optimizer step s (0-based) as a pure function of s,
// so a resumed run continues on the same curve; likewise Adam's betas where a schedule sets
// them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

namespace triad::optim {

struct AdamBetas {
  double beta1, beta2;
};

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr_at(int64_t step) const = 0;
  // Adam's betas for step s where the schedule sets them (DeepSpeed's OneCycle with
  // cycle_momentum); none: the optimizer keeps its own.
  virtual std::optional<AdamBetas> betas_at(int64_t step) const { return std::nullopt; }
};

// lr throughout, after an optional linear warmup from lr/warmup_steps.
class ConstantLR : public LRSchedule {
 public:
  explicit ConstantLR(double lr, int64_t warmup_steps = 0);
  double lr_at(int64_t step) const override;

 private:
  double lr_;
  int64_t warmup_;
};

// Linear warmup to max_lr over warmup_steps (step s gets max_lr (s+1)/warmup_steps), then
// cosine decay from max_lr to min_lr at total_steps; min_lr after that.
class WarmupCosineLR : public LRSchedule {
 public:
  WarmupCosineLR(double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps);
  double lr_at(int64_t step) const override;

 private:
  double max_lr_, min_lr_;
  int64_t warmup_, total_;
};

}  // namespace triad::optim
