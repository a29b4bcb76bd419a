// Argument checks that several of the ops' source files share (ops_math.cpp, ops_nn.cpp, ops_view.cpp).
#pragma once

#include "tensor/tensor.h"

namespace triad::ops {

// Throws Error naming `op` and t unless t is floating (f32, f64, bf16 or f16).
void check_float(const Tensor& t, const char* op);
// Throws Error naming `op` and `name` unless t is a position of Note [Positions on the
// device] (ops.h): (1,) i64 on `device`.
void check_device_position(const Tensor& t, Device device, const char* op, const char* name);

}  // namespace triad::ops
