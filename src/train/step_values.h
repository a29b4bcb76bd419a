// What each training step leaves on the device for the host to read — its micro-batches'
// losses, its gradient norm and with loss scaling its outcome — kept there, step after step, until the trainer reads
// all the unread steps' values in one copy (Note [Host synchronisation in a step] in train/trainer.cpp). Keeping a
// step's values is a copy queued on the device: the host does not wait for it.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace triad::engine {

class StepValues {
 public:
  // Steps of `micro_batches` losses each, with (outcomes) or without the loss scale's
  // outcome, at most `capacity` of them unread, on `device`.
  StepValues(int64_t micro_batches, bool outcomes, int64_t capacity, Device device);

  // Keeps one step's losses (micro_batches,), gradient norm (1,) and, when kept, its
  // outcome (kStepOutcome,: engine::QueuedStep), of any floating dtype, wherever they are
  // (a value on another device is copied to this one without a wait).
  void keep(const Tensor& losses, const Tensor& norm, const Tensor& outcome);
  int64_t row_width() const { return rows_.size(1); }
  int64_t unread() const { return unread_; }
  bool full() const { return unread_ == capacity_; }
  // The unread steps' values in the order kept, as f64, a row of row_width() per step: its
  // losses, then its norm, then its outcome when kept. One read (Tensor::to_vector): the
  // host waits for the device here. None are unread after it.
  std::vector<double> read();

 private:
  int64_t micro_batches_, capacity_, unread_ = 0;
  bool outcomes_;
  Tensor rows_;  // (capacity, row_width) f64 on the device
};

}  // namespace triad::engine
