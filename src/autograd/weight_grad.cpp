#include "autograd/weight_grad.h"

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

}  // namespace triad
