#include "optim/clip.h"

#include <cmath>

#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::optim {

double grad_norm(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (const Tensor g = grad(p); g.defined()) grads.push_back(g);
  return std::sqrt(ops::sum_squares(grads));
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TRIAD_CHECK(max_norm > 0.0, "[gradient_clipping] max norm must be positive, got " << max_norm);
  const double norm = grad_norm(params);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (const Tensor& p : params) {
      const Tensor g = grad(p);
      if (g.defined()) ops::mul_(g, coef);
    }
  return norm;
}

}  // namespace triad::optim
