#include "optim/schedule.h"

#include <cmath>

#include "tensor/error.h"

namespace triad::optim {

ConstantLR::ConstantLR(double lr, int64_t warmup_steps) : lr_(lr), warmup_(warmup_steps) {
  TRIAD_CHECK(lr >= 0.0, "[scheduler] lr must be >= 0, got " << lr);
  TRIAD_CHECK(warmup_steps >= 0, "[scheduler] warmup_steps must be >= 0, got " << warmup_steps);
}

double ConstantLR::lr_at(int64_t step) const {
  if (step < warmup_) return lr_ * double(step + 1) / double(warmup_);
  return lr_;
}

WarmupCosineLR::WarmupCosineLR(double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps)
    : max_lr_(max_lr), min_lr_(min_lr), warmup_(warmup_steps), total_(total_steps) {
  TRIAD_CHECK(max_lr >= 0.0 && min_lr >= 0.0 && min_lr <= max_lr,
              "[scheduler] need 0 <= min_lr <= max_lr, got min_lr " << min_lr << ", max_lr " << max_lr);
  TRIAD_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps,
              "[scheduler] need 0 <= warmup_steps <= total_steps, got " << warmup_steps << " and " << total_steps);
}

double WarmupCosineLR::lr_at(int64_t step) const {
  if (step < warmup_) return max_lr_ * double(step + 1) / double(warmup_);
  if (step >= total_ || total_ == warmup_) return min_lr_;
  const double progress = double(step - warmup_) / double(total_ - warmup_);
  return min_lr_ + 0.5 * (max_lr_ - min_lr_) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace triad::optim
