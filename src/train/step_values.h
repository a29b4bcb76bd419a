// What each training step leaves on the device for the host to read — its micro-batches'
// losses and its gradient norm — kept there, step after step, until the trainer reads all
// the unread steps' values in one copy (Note [Host synchronisation in a step] in
// train/trainer.cpp). Keeping a step's values is a copy queued on the device: the host
// does not wait for it.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace triad::engine {

class StepValues {
 public:
  // Steps of `micro_batches` losses each, at most `capacity` of them unread, on `device`.
  StepValues(int64_t micro_batches, int64_t capacity, Device device);

  // Keeps one step's losses (micro_batches,) and gradient norm (1,), of any floating dtype,
  // wherever they are (a value on another device is copied to this one without a wait).
  void keep(const Tensor& losses, const Tensor& norm);
  int64_t unread() const { return unread_; }
  bool full() const { return unread_ == capacity_; }
  // The unread steps' values in the order kept, as f64: step k's losses at
  // [k (micro_batches + 1), k (micro_batches + 1) + micro_batches), then its norm. One read
  // (Tensor::to_vector): the host waits for the device here. None are unread after it.
  std::vector<double> read();

 private:
  int64_t micro_batches_, capacity_, unread_ = 0;
  Tensor rows_;  // (capacity, micro_batches + 1) f64 on the device
};

}  // namespace triad::engine
