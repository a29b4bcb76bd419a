#include "autograd/node.h"

#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad {

std::vector<Tensor> FunctionNode::apply(const std::vector<Tensor>& grad_outputs) {
  TRIAD_ASSERT_MSG(backward != nullptr, "backward through " << name
                                                            << " a second time; its saved tensors were "
                                                               "released (pass retain_graph)");
  return backward(grad_outputs);
}

std::vector<Tensor> AccumulateGrad::apply(const std::vector<Tensor>& grad_outputs) {
  Tensor g = grad_outputs[0];
  AutogradMeta& m = *leaf.impl().autograd;
  if (g.defined()) {
    for (const GradHook& hook : m.hooks) g = hook(g);
    TRIAD_ASSERT_MSG(g.shape() == leaf.shape(), "gradient " << g.str() << " for leaf " << leaf.str());
    for (const PreAccumulateHook& hook : m.pre_accumulate_hooks) hook(leaf);
    if (!m.grad.defined()) {
      // Take the incoming gradient when nothing else can see its storage; copy otherwise.
      const bool exclusive = g.impl_ptr().use_count() <= 2 && g.storage().use_count() == 1 && g.is_contiguous();
      m.grad = exclusive ? detach(g) : ops::clone(g);
    } else {
      ops::add_(m.grad, g);
    }
  } else if (!added_in_place_) {
    return {};
  }
  added_in_place_ = false;
  for (const PostAccumulateHook& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

// Gradient hooks transform the gradient, which a sum made in place never holds alone.
Tensor AccumulateGrad::grad_to_add_into(DType dtype) {
  AutogradMeta& m = *leaf.impl().autograd;
  if (!m.hooks.empty()) return Tensor();
  for (const PreAccumulateHook& hook : m.pre_accumulate_hooks) hook(leaf);
  const Tensor& g = m.grad;
  const bool fits = g.defined() && g.is_contiguous() && g.device() == leaf.device() &&
                    (g.dtype() == dtype || (g.dtype() == DType::f32 && is_16bit(dtype)));
  return fits ? g : Tensor();
}

void AccumulateGrad::added_in_place(bool in_pass) {
  added_in_place_ = true;
  if (!in_pass) apply({Tensor()});
}

}  // namespace triad
