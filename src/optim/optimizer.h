// Optimizers update parameters from their accumulated gradients. Parameters come in groups
// that share a weight decay (GPT-2 practice: decay matrices and embeddings, not biases or
// norms). State is allocated on the first step, shaped like each parameter.
#pragma once

#include <vector>

#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace triad::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups, double lr);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient (others are skipped).
  virtual void step() = 0;
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

 protected:
  std::vector<ParamGroup> groups_;
  double lr_;
};

// Splits parameters into a decayed group (dim >= 2) and an undecayed one (dim < 2).
std::vector<ParamGroup> decay_groups(const std::vector<Tensor>& params, double weight_decay);

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool adam_w_mode = true;      // decoupled weight decay; false: L2, wd p added to the gradient
  bool bias_correction = true;  // false: the moments as they are (step size lr, denominator sqrt(v) + eps)
};

// Error unless both are in [0, 1).
void check_betas(double beta1, double beta2);
// The kernel's hyper-parameters for a parameter's t-th update (t >= 1), bias corrections
// from the options' current betas (as PyTorch and DeepSpeed compute them when the betas change).
AdamWStep adamw_step(const AdamWOptions& options, double lr, double weight_decay, int64_t t);

// Adam with decoupled weight decay (Loshchilov & Hutter) or, adam_w_mode false, L2
// regularization; bias-corrected unless bias_correction is false; one fused in-place update
// per group (ops::adamw_ on the group's parameters: one launch on a GPU).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);
  void step() override;
  // New betas take effect on the next step (a schedule's, like set_lr).
  void set_betas(double beta1, double beta2);

  // Calls to step(). Bias correction uses each parameter's own count of updates (PyTorch's
  // per-parameter state['step']): a parameter skipped for lack of a gradient does not advance.
  int64_t step_count() const { return step_count_; }
  // State of parameter i in group order (undefined before the first step).
  const Tensor& exp_avg(size_t i) const { return exp_avg_[i]; }
  const Tensor& exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }

 private:
  AdamWOptions options_;
  int64_t step_count_ = 0;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> param_steps_;  // updates applied to parameter i
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
};

// SGD with optional momentum: buf = momentum buf + (1 - dampening) g; p -= lr buf
// (nesterov: p -= lr (g + momentum buf)). Weight decay is L2, added to the gradient. One
// fused in-place update per group (ops::sgd_: one launch on a GPU).
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);
  void step() override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;
};

}  // namespace triad::optim
