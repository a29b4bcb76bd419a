// The backward pass: count, for every node reachable from the roots, how many edges point
// at it; then run nodes whose count has dropped to zero, summing the gradients that arrive
// for each of their outputs. A node runs only after every consumer of its outputs has.
#include "autograd/engine.h"

#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad {

namespace {

void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined())
    slot = g;
  else
    slot = ops::add(slot, g);
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  TRIAD_CHECK(roots.size() == grad_roots.size(),
              "backward: " << roots.size() << " roots but " << grad_roots.size() << " gradients");
  NoGradGuard no_grad;
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::vector<Tensor>> inputs;
  std::vector<std::shared_ptr<Node>> stack, ready;

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TRIAD_CHECK(requires_grad(root), "backward: tensor " << root.str() << " does not require grad");
    Tensor g = grad_roots[i];
    if (!g.defined()) {
      TRIAD_CHECK(root.numel() == 1, "backward: a gradient must be given for the non-scalar root " << root.str());
      g = Tensor::ones(root.shape(), root.dtype(), root.device());
    }
    TRIAD_CHECK(g.shape() == root.shape(), "backward: gradient " << g.str() << " does not match root " << root.str());
    const Edge e = gradient_edge(root);
    auto& buf = inputs[e.node.get()];
    if (buf.empty()) {
      buf.resize(e.node->num_outputs);
      stack.push_back(e.node);
    }
    accumulate(buf[e.input_nr], g);
  }

  // Dependency counts over the reachable graph.
  std::vector<std::shared_ptr<Node>> walk = stack;
  std::unordered_map<Node*, bool> seen;
  for (auto& n : walk) seen[n.get()] = true;
  while (!walk.empty()) {
    std::shared_ptr<Node> n = std::move(walk.back());
    walk.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (!seen[e.node.get()]) {
        seen[e.node.get()] = true;
        walk.push_back(e.node);
      }
    }
  }
  for (auto& n : stack)
    if (dependencies[n.get()] == 0) ready.push_back(n);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    std::vector<Tensor> grads = std::move(inputs[node.get()]);
    inputs.erase(node.get());
    grads.resize(node->num_outputs);
    for (size_t o = 0; o < node->output_hooks.size(); ++o)
      for (const GradHook& hook : node->output_hooks[o])
        if (grads[o].defined()) grads[o] = hook(grads[o]);

    // A node none of whose outputs received a gradient (e.g. it feeds only a checkpoint
    // input the segment ignores) passes none on; it still counts as done for its inputs.
    bool any_grad = false;
    for (const Tensor& g : grads) any_grad = any_grad || g.defined();
    std::vector<Tensor> input_grads =
        any_grad || node->runs_without_gradients() ? node->apply(grads) : std::vector<Tensor>();
    if (!retain_graph) node->release();
    grads.clear();
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.node) continue;
      auto& buf = inputs[e.node.get()];
      if (buf.empty()) buf.resize(e.node->num_outputs);
      if (i < input_grads.size()) accumulate(buf[e.input_nr], input_grads[i]);
      if (--dependencies[e.node.get()] == 0) ready.push_back(e.node);
    }
  }
}

void backward(const Tensor& root, const Tensor& grad_root, bool retain_graph) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad_root}, retain_graph);
}

}  // namespace triad
