#include "optim/clip.h"

#include <cmath>

#include "autograd/meta.h"
#include "tensor/ops.h"
#include "tensor/optimizer_math.h"

namespace triad::optim {

double clip_coefficient(double norm, double max_norm) { return max_norm > 0.0 ? clip_factor(norm, max_norm) : 1.0; }

void clip_grads(const std::vector<Tensor>& grads, double norm, double max_norm) {
  const double coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0)
    for (const Tensor& g : grads) ops::mul_(g, coef);
}

namespace {

std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (const Tensor g = grad(p); g.defined()) grads.push_back(g);
  return grads;
}

// The L2 norm of the gradients together, their squares summed in double.
double norm_of(const std::vector<Tensor>& grads) { return grads.empty() ? 0.0 : std::sqrt(ops::sum_squares(grads)); }

}  // namespace

double grad_norm(const std::vector<Tensor>& params) { return norm_of(grads_of(params)); }

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TRIAD_CHECK(max_norm > 0.0, "[gradient_clipping] max norm must be positive, got " << max_norm);
  const std::vector<Tensor> grads = grads_of(params);
  const double norm = norm_of(grads);
  clip_grads(grads, norm, max_norm);
  return norm;
}

}  // namespace triad::optim
