#include "zero/device_loss_scale.h"

#include "tensor/device_runtime.h"
#include "tensor/ops.h"
#include "tensor/optimizer_ops.h"

namespace triad::zero {

DeviceLossScale::DeviceLossScale(const optim::LossScaleConfig& config, double predivide, int ranks, int64_t groups,
                                 Device device, int64_t ring_rows)
    : state_(Tensor::empty({kLossScaleSlots}, DType::f64, device)),
      ring_(Tensor::zeros({ring_rows, 1 + groups * kAdamWConstants}, DType::f64, device)),
      constants_(Tensor::empty({groups, kAdamWConstants}, DType::f32, device)) {
  const optim::LossScaler initial(config);
  rule_ = initial.rule();
  rule_.predivide = predivide, rule_.ranks = double(ranks);
  TRIAD_CHECK(ring_rows >= 2, "DeviceLossScale: the ring needs 2 rows or more, got " << ring_rows);
  write({0, initial.state()});
}

Tensor DeviceLossScale::seed(double divisor, DType dtype) const {
  // The host path's scale / divisor in f64, rounded once to dtype as Tensor::full rounds it.
  const Tensor scale = ops::narrow(state_, 0, kLossScale, 1);
  return ops::to(ops::reshape(ops::div(scale, Tensor::full({1}, divisor, DType::f64, state_.device())), {}), dtype);
}

void DeviceLossScale::unscale(const std::vector<Tensor>& grads) const {
  ops::mul_by_(grads, ops::narrow(state_, 0, kUnscale, 1));
}

void DeviceLossScale::prepare(const RowAt& row_at) {
  const int64_t rows = ring_.size(0);
  if (unread_ == rows - 1) read();  // the rows of every possible count must stay apart
  const int64_t groups = constants_.size(0);
  const Tensor constants = Tensor::empty({groups, kAdamWConstants}, DType::f32);
  std::vector<double> row(size_t(1 + groups * kAdamWConstants));
  for (; written_ <= read_taken_ + unread_; ++written_) {
    row[0] = row_at(written_, constants);
    const float* k = constants.data<float>();
    for (int64_t i = 0; i < groups * kAdamWConstants; ++i) row[size_t(1 + i)] = double(k[i]);
    copy_from_host(ops::select(ring_, 0, written_ % rows), Tensor::from_vector(row, {int64_t(row.size())}));
  }
}

Tensor DeviceLossScale::decide(const Tensor& squared) {
  const Tensor outcome = Tensor::empty({kStepOutcome}, DType::f64, state_.device());
  ops::loss_scale_step_(squared, state_, ring_, constants_, outcome, rule_);
  ++unread_;
  return outcome;
}

DeviceLossScale::Counters DeviceLossScale::read() {
  const std::vector<double> s = state_.to_vector<double>();
  read_taken_ = int64_t(s[kStepsTaken]);
  unread_ = 0;
  return {read_taken_, {s[kLossScale], int(s[kHysteresisLeft]), int64_t(s[kCleanSteps])}};
}

void DeviceLossScale::write(const Counters& c) {
  std::vector<double> s(kLossScaleSlots, 0.0);
  s[kLossScale] = c.scale.scale;
  s[kHysteresisLeft] = double(c.scale.hysteresis_left);
  s[kCleanSteps] = double(c.scale.clean_steps);
  s[kStepsTaken] = double(c.taken);
  s[kUnscale] = unscale_factor(rule_, c.scale.scale);
  copy_from_host(state_, Tensor::from_vector(s, {kLossScaleSlots}));
  read_taken_ = written_ = c.taken;
  unread_ = 0;
}

}  // namespace triad::zero
