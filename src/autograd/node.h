// The tape. Each recorded operation is a Node: given the gradients of its outputs it
// returns the gradients of its inputs, which flow along `next` to the nodes that produced
// those inputs (or to the AccumulateGrad node of a leaf). Output tensors own their node
// through AutogradMeta::grad_fn; a node owns the tensors its backward needs.
//
// Note [Saved outputs]: a backward that needs an operation's own output must save it
// through detach(), a handle over the same storage without autograd meta; saving the
// output itself would make output -> node -> output a reference cycle.
//
// Note [Saved inputs]: inputs are saved by handle (no cycle: an input's history points
// backwards only). A backward thus sees the storage an input has when the backward runs:
// ZeRO stage 3 releases a parameter's storage after the forward and restores it before
// the backward, and the saved handle follows.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace triad {

struct Node;

// Where the gradient of one input goes: input `input_nr` of `node`. A null node means the
// input needs no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
};

// Transforms a gradient flowing into a tensor (may return it unchanged or a new tensor).
using GradHook = std::function<Tensor(const Tensor& grad)>;
// Runs after a leaf's .grad has absorbed a new contribution.
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;
// Runs before a leaf's .grad absorbs a contribution, and before a backward asks for the
// leaf's .grad to add into (Note [Gradients added in place]); it may set .grad, and must
// give the same result when run again.
using PreAccumulateHook = std::function<void(const Tensor& leaf)>;
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
  explicit Node(std::string name, int num_outputs = 1) : name(std::move(name)), num_outputs(num_outputs) {}
  virtual ~Node() = default;

  // Gradients of the inputs (one per entry of `next`; undefined where not needed).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Drops what the backward saved, once it has run (unless the graph is retained).
  virtual void release() {}
  // Whether the node must run even when no gradient reached it (an AccumulateGrad whose
  // leaf's gradient was added in place during the pass).
  virtual bool runs_without_gradients() const { return false; }

  std::string name;
  int num_outputs;
  std::vector<Edge> next;
  // Hooks on the gradient of each output (registered on non-leaf tensors).
  std::vector<std::vector<GradHook>> output_hooks;
};

// An operation's backward as a closure.
struct FunctionNode final : Node {
  FunctionNode(std::string name, int num_outputs, BackwardFn fn)
      : Node(std::move(name), num_outputs), backward(std::move(fn)) {}
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override;
  void release() override { backward = nullptr; }

  BackwardFn backward;
};

// The sink of a leaf: adds the incoming gradient into the leaf's .grad, then runs the
// leaf's post-accumulate hooks, once per pass however the gradient arrived.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(Tensor leaf) : Node("AccumulateGrad", 1), leaf(std::move(leaf)) {}
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override;
  bool runs_without_gradients() const override { return added_in_place_; }

  // Note [Gradients added in place] (autograd/weight_grad.h): the leaf's .grad when a
  // backward may add a contribution of `dtype` into it in place, else undefined; then
  // added_in_place() once the backward has added it.
  Tensor grad_to_add_into(DType dtype);
  void added_in_place(bool in_pass);

  Tensor leaf;

 private:
  bool added_in_place_ = false;  // this pass added into .grad; the hooks run when the node does
};

}  // namespace triad
