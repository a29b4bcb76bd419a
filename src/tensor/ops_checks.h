// Argument checks that several of the ops' source files share (ops_math.cpp, ops_nn.cpp, ops_view.cpp,
// quantized_matmul.cpp).
#pragma once

#include <optional>

#include "tensor/tensor.h"

namespace triad::ops {

// Throws Error naming `op` and t unless t is floating (f32, f64, bf16 or f16).
void check_float(const Tensor& t, const char* op);
// Throws Error naming `op` and `name` unless t is a position of Note [Positions on the
// device] (ops.h): (1,) i64 on `device`.
void check_device_position(const Tensor& t, Device device, const char* op, const char* name);
// Indices must be i64/i32 on `device`, in [0, limit); with an `ignore` value, that value is
// also allowed. Returns the indices contiguous on their device, as i64 when `wide`. The
// range is checked here on the CPU only: a device backend's kernels check it themselves,
// so the host never waits for indices (Backend::embedding).
Tensor check_indices(const Tensor& idx, Device device, int64_t limit, std::optional<int64_t> ignore, bool wide,
                     const char* op);

}  // namespace triad::ops
