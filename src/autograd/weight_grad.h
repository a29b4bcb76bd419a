#pragma once

#include <functional>
#include <vector>

namespace triad {

class WeightGradQueue {
 public:
  bool empty() const { return work_.empty(); }
  size_t size() const { return work_.size(); }
  void run() {
    for (auto& f : work_) f();
    work_.clear();
  }

 private:
  std::vector<std::function<void()>> work_;
};

class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue&) {}
};

}  // namespace triad
