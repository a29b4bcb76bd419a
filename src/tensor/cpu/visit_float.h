// Calls f(T{}) with T the compute type of a floating kernel: double for f64, float
// otherwise (the op layer has already rejected every other dtype).
#pragma once

#include "tensor/dtype.h"

namespace triad::cpu {

template <class F>
void visit_float(DType t, F&& f) {
  if (t == DType::f64)
    f(double{});
  else
    f(float{});
}

}  // namespace triad::cpu
