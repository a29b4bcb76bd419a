// Global-norm gradient clipping.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace triad::optim {

// The L2 norm of all gradients together (accumulated in double).
double grad_norm(const std::vector<Tensor>& params);
// Scales every gradient by max_norm / (norm + 1e-6) when that is below 1 (PyTorch's rule);
// returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace triad::optim
