// Note [Split backward]: zero-bubble pipeline schedules (ZB-H1, arXiv 2401.10241) split a
// micro-batch's backward into its input-gradient part B, which the previous stage waits
// for, and its weight-gradient part W, which nobody waits for and can fill the bubble.
// Under a DeferWeightGrads guard, the backward of a linear op whose weight is a leaf
// computes the gradient of its input at once and queues the products that give its
// weight's and bias's gradients; WeightGradQueue::run() computes them later and delivers
// each to its leaf exactly as the plain backward would (the leaf's hooks fire then). Every
// other gradient (LayerNorm, embeddings) is computed during B. A queued closure keeps the
// layer's input and its output's gradient alive until it runs, and nothing else.
//
// Note [Gradients added in place]: a linear weight's gradient is a GEMM (linear's g^T x,
// the fused classifier's d(logits)^T x per chunk). Returned as a tensor it is written
// whole, then read again to be added into the leaf's .grad (a later micro-batch; ZeRO's
// flat gradient buffer, zeroed when made). Where the leaf has a .grad that can take the
// sum, the backward adds its product into it instead (ops::add_matmul_, cuBLASLt's beta =
// 1): no temporary, no elementwise add, and a 16-bit .grad rounded once instead of twice.
// It can when the leaf has no gradient hooks (they transform a gradient that a sum made in
// place never holds alone) and, once its pre-accumulate hooks have run (ZeRO makes its
// flat buffer in one), a contiguous .grad of the product's dtype or f32; otherwise the
// backward returns the gradient as before. The post-accumulate hooks still run once per
// pass, after every contribution: the leaf's AccumulateGrad runs at its turn even when no
// gradient reached it along the tape (Node::runs_without_gradients), or at once for a
// gradient delivered from the split-backward queue. The sum differs from the returned
// gradient's in its order only (ops::add_matmul_'s contract).
#pragma once

#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace triad {

class WeightGradQueue {
 public:
  bool empty() const { return work_.empty(); }
  size_t size() const { return work_.size(); }
  void push(std::function<void()> work) { work_.push_back(std::move(work)); }
  // Computes and delivers every queued gradient in the order queued, then empties.
  void run();

 private:
  std::vector<std::function<void()>> work_;
};

// While alive, backward passes on this thread defer linear weight gradients into `queue`
// (nested guards: the innermost queue).
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue& queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  WeightGradQueue* previous_;
};

// The queue weight gradients go to now (null: compute them in the backward).
WeightGradQueue* deferred_weight_grads();

// The .grad into which a backward may add a contribution of `dtype` to the gradient of
// `weight` in place (Note [Gradients added in place]); undefined when weight is not a
// leaf that requires grad or cannot take it (the backward then returns the gradient).
Tensor grad_to_add_into(const Tensor& weight, DType dtype);
// To call once the backward has added into that buffer: in_pass from within the backward
// pass (the hooks run when the leaf's node does), else (the queue) the hooks run now.
void grad_added_in_place(const Tensor& weight, bool in_pass);

}  // namespace triad
