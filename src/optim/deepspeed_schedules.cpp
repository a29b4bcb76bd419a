#include "optim/deepspeed_schedules.h"

#include <algorithm>
#include <cmath>

#include "tensor/error.h"

namespace triad::optim::deepspeed {

WarmupType parse_warmup_type(const std::string& name) {
  if (name == "log") return WarmupType::log;
  TRIAD_CHECK(name == "linear", "[scheduler] warmup_type must be \"log\" or \"linear\", got \"" << name << "\"");
  return WarmupType::linear;
}

namespace {

// DeepSpeed takes warmup_num_steps >= 1 and warms up over at least 2 steps (log(1) would
// divide by 0).
int64_t warmup_steps(int64_t n) {
  TRIAD_CHECK(n >= 1, "[scheduler] warmup_num_steps must be >= 1, got " << n);
  return std::max<int64_t>(2, n);
}

double gamma(int64_t i, int64_t warmup, WarmupType type) {
  return type == WarmupType::log ? std::log(double(i + 1)) / std::log(double(warmup)) : double(i) / double(warmup);
}

}  // namespace

WarmupLR::WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps, WarmupType type)
    : min_(min_lr), max_(max_lr), warmup_(warmup_steps(warmup_num_steps)), type_(type) {
  TRIAD_CHECK(min_lr >= 0 && max_lr >= 0,
              "[scheduler] warmup_min_lr and warmup_max_lr must be >= 0, got " << min_lr << " and " << max_lr);
}

double WarmupLR::warmup_gamma(int64_t i) const { return gamma(i, warmup_, type_); }

double WarmupLR::rate(int64_t i) const {
  if (i < 0) return min_;
  return min_ + (max_ - min_) * (i < warmup_ ? warmup_gamma(i) : 1.0);
}

WarmupDecayLR::WarmupDecayLR(double min_lr, double max_lr, int64_t warmup_num_steps, int64_t total_num_steps,
                             WarmupType type)
    : WarmupLR(min_lr, max_lr, warmup_num_steps, type), total_(total_num_steps) {
  TRIAD_CHECK(total_num_steps >= 1, "[scheduler] WarmupDecayLR needs total_num_steps >= 1, got " << total_num_steps);
}

double WarmupDecayLR::rate(int64_t i) const {
  if (i < 0) return min_;
  const double g = i < warmup_ ? warmup_gamma(i)
                               : std::max(0.0, double(total_ - i) / std::max(1.0, double(total_ - warmup_)));
  return min_ + (max_ - min_) * g;
}

WarmupCosineLR::WarmupCosineLR(double lr, int64_t total_num_steps, double warmup_min_ratio, int64_t warmup_num_steps,
                               double cos_min_ratio, WarmupType type)
    : lr_(lr),
      warmup_min_ratio_(warmup_min_ratio),
      cos_min_ratio_(cos_min_ratio),
      total_(total_num_steps),
      warmup_(warmup_steps(warmup_num_steps)),
      type_(type) {
  TRIAD_CHECK(lr >= 0, "[scheduler] WarmupCosineLR: the optimizer's lr must be >= 0, got " << lr);
  TRIAD_CHECK(total_num_steps >= 0,
              "[scheduler] WarmupCosineLR: total_num_steps must be >= 0, got " << total_num_steps);
}

double WarmupCosineLR::rate(int64_t i) const {
  if (i < 0) return 0.0;
  if (i < warmup_) return lr_ * (warmup_min_ratio_ + gamma(i, warmup_, type_) * (1.0 - warmup_min_ratio_));
  const double progress = std::min(1.0, double(i - warmup_ + 1) / double(std::max<int64_t>(1, total_ - warmup_)));
  const double cosine = (1.0 + std::cos(M_PI * progress)) / 2.0;
  return lr_ * std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * cosine);
}

OneCycle::OneCycle(double min_lr, double max_lr, double decay_lr_rate, const CycleShape& shape,
                   int64_t decay_step_size, std::optional<MomentumCycle> momentum)
    : min_(min_lr),
      max_(max_lr),
      decay_rate_(decay_lr_rate),
      first_(double(shape.first_step_size)),
      second_(double(shape.second_step_size.value_or(shape.first_step_size))),
      total_(first_ + second_),
      first_stairs_(shape.first_stair_count),
      second_stairs_(shape.second_stair_count.value_or(shape.first_stair_count)),
      decay_step_size_(decay_step_size),
      momentum_(momentum) {
  TRIAD_CHECK(shape.first_step_size >= 1 && second_ >= 0,
              "[scheduler] OneCycle needs cycle_first_step_size >= 1 and cycle_second_step_size >= 0, got "
                  << shape.first_step_size << " and " << second_);
  TRIAD_CHECK(first_stairs_ >= 0 && second_stairs_ >= 0,
              "[scheduler] OneCycle: cycle_first_stair_count and cycle_second_stair_count must be >= 0, got "
                  << first_stairs_ << " and " << second_stairs_);
  TRIAD_CHECK(decay_step_size >= 0, "[scheduler] OneCycle: decay_step_size must be >= 0, got " << decay_step_size);
}

double OneCycle::cycle_fraction(int64_t i) const {
  const double b = double(i + 1);
  const double x = 1.0 + b / total_ - std::floor(1.0 + b / total_), ratio = first_ / total_;
  const bool rising = x <= ratio;
  const int64_t stairs = rising ? first_stairs_ : second_stairs_;
  if (stairs == 0) return rising ? x / ratio : (x - 1.0) / (ratio - 1.0);
  // Stairs count from the integer offset in the cycle (rising while it is within S1).
  const double c = std::fmod(b, total_);
  const double position = c <= first_ ? c * double(stairs) / first_ : (total_ - c) * double(stairs) / second_;
  return std::floor(position) / double(stairs);
}

double OneCycle::rate(int64_t i) const {
  if (i < 0) return min_;
  if (double(i) < total_) return min_ + (max_ - min_) * cycle_fraction(i);
  if (decay_step_size_ == 0 || decay_rate_ == 0.0) return min_;
  const double interval = (double(i) - total_ + 1.0) / double(decay_step_size_);
  return min_ / (1.0 + decay_rate_ * interval);
}

double OneCycle::momentum(int64_t i) const {
  const MomentumCycle& m = *momentum_;
  if (i < 0) return m.min_mom;
  if (double(i) < total_) return m.max_mom - (m.max_mom - m.min_mom) * cycle_fraction(i);
  if (decay_step_size_ == 0 || m.decay_mom_rate == 0.0) return m.max_mom;
  const double interval = (double(i) - total_ + 1.0) / double(decay_step_size_);
  return m.max_mom * (1.0 + m.decay_mom_rate * interval);
}

std::optional<AdamBetas> OneCycle::betas_at(int64_t step) const {
  if (!momentum_) return std::nullopt;
  return AdamBetas{momentum(step - 1), 0.99};
}

LRRangeTest::LRRangeTest(double min_lr, int64_t step_size, double step_rate, bool staircase)
    : min_(min_lr), step_rate_(step_rate), step_size_(step_size), staircase_(staircase) {
  TRIAD_CHECK(step_size >= 1, "[scheduler] LRRangeTest needs lr_range_test_step_size >= 1, got " << step_size);
}

double LRRangeTest::rate(int64_t i) const {
  if (i < 0) return min_;
  const double n = double(i + 1) / double(step_size_);
  return min_ * (1.0 + step_rate_ * (staircase_ ? std::floor(n) : n));
}

}  // namespace triad::optim::deepspeed
