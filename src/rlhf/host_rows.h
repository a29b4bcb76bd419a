// Host copies of small (B, A) tensors for the RLHF computations that run row by row on the
// CPU (rewards, advantages): values in f64, masks checked to hold only 0 and 1.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace triad::rlhf {

// The elements of t, row-major, as f64 (t copied from its device, gradient history ignored).
std::vector<double> host_values(const Tensor& t);
// The elements of each of `parts` (any shapes and dtypes, on one device), one part after
// another, as f64 (exactly: every dtype converts to f64 without rounding), read in one wait:
// gathered on the device and copied to the host once. None for no parts.
std::vector<double> host_values(const std::vector<Tensor>& parts);
// Host copies of `parts`, each of its shape and dtype with its values exact, read in one
// wait (host_values).
std::vector<Tensor> host_copies(const std::vector<Tensor>& parts);
// The same for a 0/1 mask of shape `shape`; Error naming `what` when a value is neither
// or the shape differs.
std::vector<double> host_mask(const Tensor& mask, const Shape& shape, const char* what);
// A (rows, cols) tensor of `values` in like's dtype, on like's device.
Tensor tensor_like(const std::vector<double>& values, const Shape& shape, const Tensor& like);

}  // namespace triad::rlhf
