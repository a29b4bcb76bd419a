#include "nn/router_loss.h"

#include "autograd/record.h"
#include "tensor/ops.h"

namespace triad::nn {

namespace {
thread_local double seed_gradient = 1.0;
}

double router_loss_gradient() { return seed_gradient; }

RouterLossGradient::RouterLossGradient(double seed) : previous_(seed_gradient) { seed_gradient = seed; }
RouterLossGradient::~RouterLossGradient() { seed_gradient = previous_; }

Tensor attach_router_loss(const Tensor& out, const Tensor& loss) {
  TRIAD_CHECK(loss.numel() == 1, "attach_router_loss: the loss must be a scalar, got " << shape_str(loss.shape()));
  return record("attach_router_loss", {out, loss}, detach(out), [loss_shape = loss.shape(), dtype = loss.dtype(),
                                                                 device = loss.device()](const Grads& g) {
    return Grads{g[0], Tensor::full(loss_shape, router_loss_gradient(), dtype, device)};
  });
}

}  // namespace triad::nn
