// Argument checks that several of the ops' source files share (ops_math.cpp, ops_nn.cpp).
#pragma once

#include "tensor/tensor.h"

namespace triad::ops {

// Throws Error naming `op` and t unless t is floating (f32, f64, bf16 or f16).
void check_float(const Tensor& t, const char* op);

}  // namespace triad::ops
