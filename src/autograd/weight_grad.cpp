#include "autograd/weight_grad.h"

#include "autograd/meta.h"

namespace triad {

namespace {
thread_local WeightGradQueue* active = nullptr;
}  // namespace

void WeightGradQueue::run() {
  std::vector<std::function<void()>> work = std::move(work_);
  work_.clear();
  for (auto& w : work) w();
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue& queue) : previous_(active) { active = &queue; }
DeferWeightGrads::~DeferWeightGrads() { active = previous_; }

WeightGradQueue* deferred_weight_grads() { return active; }

namespace {
AccumulateGrad* accumulator(const Tensor& weight) {
  return requires_grad(weight) && is_leaf(weight) ? static_cast<AccumulateGrad*>(gradient_edge(weight).node.get())
                                                  : nullptr;
}
}  // namespace

Tensor grad_to_add_into(const Tensor& weight, DType dtype) {
  AccumulateGrad* acc = accumulator(weight);
  return acc ? acc->grad_to_add_into(dtype) : Tensor();
}

void grad_added_in_place(const Tensor& weight, bool in_pass) {
  AccumulateGrad* acc = accumulator(weight);
  TRIAD_ASSERT(acc != nullptr);
  acc->added_in_place(in_pass);
}

}  // namespace triad
