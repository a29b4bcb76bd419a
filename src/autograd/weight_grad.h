// Note [Split backward]: zero-bubble pipeline schedules (ZB-H1, arXiv 2401.10241) split a
// micro-batch's backward into its input-gradient part B, which the previous stage waits
// for, and its weight-gradient part W, which nobody waits for and can fill the bubble.
// Under a DeferWeightGrads guard, the backward of a linear op whose weight is a leaf
// computes the gradient of its input at once and queues the products that give its
// weight's and bias's gradients; WeightGradQueue::run() computes them later and delivers
// each to its leaf exactly as the plain backward would (the leaf's hooks fire then). Every
// other gradient (LayerNorm, embeddings) is computed during B. A queued closure keeps the
// layer's input and its output's gradient alive until it runs, and nothing else.
#pragma once

#include <functional>
#include <vector>

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

}  // namespace triad
