// Gradient state of a tensor (Note [Autograd slot] in tensor/tensor.h) and the functions
// that read and set it. A tensor is a leaf when it requires grad and no recorded op made
// it; leaves accumulate gradients into .grad, others pass them on through grad_fn.
#pragma once

#include <memory>

#include "autograd/node.h"

namespace triad {

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_nr = 0;              // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;
  std::vector<GradHook> hooks;  // leaves: run before accumulation
  std::vector<PreAccumulateHook> pre_accumulate_hooks;
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

bool requires_grad(const Tensor& t);
// Marks a leaf as requiring grad (or not). Throws for a non-leaf.
const Tensor& set_requires_grad(const Tensor& t, bool on = true);
bool is_leaf(const Tensor& t);
Tensor grad(const Tensor& t);  // undefined when none has been accumulated
void set_grad(const Tensor& t, const Tensor& grad);
const std::shared_ptr<Node>& grad_fn(const Tensor& t);
// A new handle over the same data with no gradient history.
Tensor detach(const Tensor& t);

// Registers a hook on the gradient that flows into t (leaf or not).
void register_hook(const Tensor& t, GradHook hook);
// Registers a hook that runs before the leaf t's .grad is updated (PreAccumulateHook).
void register_pre_accumulate_grad_hook(const Tensor& t, PreAccumulateHook hook);
// Registers a hook that runs each time the leaf t's .grad has been updated.
void register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateHook hook);

// The edge along which a gradient for t must flow (null node when t needs none).
Edge gradient_edge(const Tensor& t);
// Attaches `node` as the producer of `outputs` (output i gets output_nr i) and wires its
// edges to `inputs`. Used by autograd/record.h.
void set_history(const std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node);

}  // namespace triad
