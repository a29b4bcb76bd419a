#include "nn/router_loss.h"

#include "autograd/record.h"
#include "tensor/ops.h"

namespace triad::nn {

namespace {
thread_local Tensor seed_gradient;
}

Tensor router_loss_gradient() { return seed_gradient; }

RouterLossGradient::RouterLossGradient(Tensor seed) : previous_(std::move(seed_gradient)) {
  seed_gradient = std::move(seed);
}
RouterLossGradient::~RouterLossGradient() { seed_gradient = std::move(previous_); }

Tensor attach_router_loss(const Tensor& out, const Tensor& loss) {
  TRIAD_CHECK(loss.numel() == 1, "attach_router_loss: the loss must be a scalar, got " << shape_str(loss.shape()));
  return record("attach_router_loss", {out, loss}, detach(out),
                [loss_shape = loss.shape(), dtype = loss.dtype(), device = loss.device()](const Grads& g) {
                  const Tensor seed = router_loss_gradient();
                  return Grads{g[0], seed.defined() ? ops::reshape(ops::to(ops::to(seed, device), dtype), loss_shape)
                                                    : Tensor::full(loss_shape, 1.0, dtype, device)};
                });
}

}  // namespace triad::nn
