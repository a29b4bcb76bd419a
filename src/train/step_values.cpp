#include "train/step_values.h"

#include "tensor/loss_scale_math.h"
#include "tensor/ops.h"

namespace triad::engine {

StepValues::StepValues(int64_t micro_batches, bool outcomes, int64_t capacity, Device device)
    : micro_batches_(micro_batches),
      capacity_(capacity),
      outcomes_(outcomes),
      rows_(Tensor::empty({capacity, micro_batches + 1 + (outcomes ? kStepOutcome : 0)}, DType::f64, device)) {
  TRIAD_ASSERT(micro_batches > 0 && capacity > 0);
}

void StepValues::keep(const Tensor& losses, const Tensor& norm, const Tensor& outcome) {
  TRIAD_ASSERT(unread_ < capacity_ && losses.numel() == micro_batches_ && norm.numel() == 1 &&
               outcome.defined() == outcomes_);
  const Tensor row = ops::select(rows_, 0, unread_++);
  ops::copy_(ops::narrow(row, 0, 0, micro_batches_), ops::to(ops::flatten(losses), rows_.device()));
  ops::copy_(ops::narrow(row, 0, micro_batches_, 1), ops::to(ops::flatten(norm), rows_.device()));
  if (outcomes_) ops::copy_(ops::narrow(row, 0, micro_batches_ + 1, kStepOutcome), ops::to(outcome, rows_.device()));
}

std::vector<double> StepValues::read() {
  if (unread_ == 0) return {};
  std::vector<double> values = ops::narrow(rows_, 0, 0, unread_).to_vector<double>();
  unread_ = 0;
  return values;
}

}  // namespace triad::engine
