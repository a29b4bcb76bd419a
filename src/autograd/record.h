// Recording an operation on the tape: the one helper every differentiable function uses.
//
//   Tensor y = ops::exp(x);
//   return record("exp", {x}, y, [y = detach(y)](const Grads& g) { return Grads{ops::mul(g[0], y)}; });
//
// When grad mode is off or no input requires grad, nothing is recorded and the closure is
// dropped. The closure returns one gradient per input (undefined where not needed) and runs
// with grad mode off.
#pragma once

#include "autograd/grad_mode.h"
#include "autograd/meta.h"

namespace triad {

using Grads = std::vector<Tensor>;

bool any_requires_grad(const std::vector<Tensor>& inputs);

std::vector<Tensor> record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                           BackwardFn backward);

inline Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor output, BackwardFn backward) {
  return record(name, inputs, std::vector<Tensor>{std::move(output)}, std::move(backward))[0];
}

}  // namespace triad
