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
  if (!g.defined()) return {};
  AutogradMeta& m = *leaf.impl().autograd;
  for (const GradHook& hook : m.hooks) g = hook(g);
  TRIAD_ASSERT_MSG(g.shape() == leaf.shape(), "gradient " << g.str() << " for leaf " << leaf.str());
  if (!m.grad.defined()) {
    // Take the incoming gradient when nothing else can see its storage; copy otherwise.
    const bool exclusive = g.impl_ptr().use_count() <= 2 && g.storage().use_count() == 1 && g.is_contiguous();
    m.grad = exclusive ? detach(g) : ops::clone(g);
  } else {
    ops::add_(m.grad, g);
  }
  for (const PostAccumulateHook& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

}  // namespace triad
