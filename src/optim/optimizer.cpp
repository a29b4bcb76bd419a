#include "optim/optimizer.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/optimizer_ops.h"

namespace triad::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  TRIAD_CHECK(lr >= 0.0 && std::isfinite(lr), "[optimizer] lr must be a finite non-negative number, got " << lr);
  for (const ParamGroup& g : groups_)
    TRIAD_CHECK(g.weight_decay >= 0.0, "[optimizer] weight_decay must be >= 0, got " << g.weight_decay);
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) set_grad(p, Tensor());
}

std::vector<ParamGroup> decay_groups(const std::vector<Tensor>& params, double weight_decay) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

void check_betas(double beta1, double beta2) {
  TRIAD_CHECK(beta1 >= 0.0 && beta1 < 1.0, "[optimizer] AdamW beta1 must be in [0, 1), got " << beta1);
  TRIAD_CHECK(beta2 >= 0.0 && beta2 < 1.0, "[optimizer] AdamW beta2 must be in [0, 1), got " << beta2);
}

AdamWStep adamw_step(const AdamWOptions& o, double lr, double weight_decay, int64_t t) {
  const bool bc = o.bias_correction;
  return {lr,
          o.beta1,
          o.beta2,
          o.eps,
          weight_decay,
          bc ? 1.0 - std::pow(o.beta1, double(t)) : 1.0,
          bc ? 1.0 - std::pow(o.beta2, double(t)) : 1.0,
          o.adam_w_mode};
}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o) : Optimizer(std::move(groups), o.lr), options_(o) {
  check_betas(o.beta1, o.beta2);
  TRIAD_CHECK(o.eps > 0.0, "[optimizer] AdamW eps must be positive, got " << o.eps);
}

void AdamW::set_betas(double beta1, double beta2) {
  check_betas(beta1, beta2);
  options_.beta1 = beta1;
  options_.beta2 = beta2;
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_count_;
  size_t i = 0;
  for (const ParamGroup& g : groups_) {
    std::vector<AdamWTensors> updates;  // the group's, in one call (one launch on a GPU)
    for (const Tensor& p : g.params) {
      if (exp_avg_.size() <= i) {
        exp_avg_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
        exp_avg_sq_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
        param_steps_.push_back(0);
      }
      if (const Tensor gp = grad(p); gp.defined())
        updates.push_back({.param = p,
                           .grad = gp,
                           .exp_avg = exp_avg_[i],
                           .exp_avg_sq = exp_avg_sq_[i],
                           .param_copy = Tensor(),
                           .step = adamw_step(options_, lr_, g.weight_decay, ++param_steps_[i])});
      ++i;
    }
    ops::adamw_(updates);
  }
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o) : Optimizer(std::move(groups), o.lr), options_(o) {
  TRIAD_CHECK(o.momentum >= 0.0, "[optimizer] SGD momentum must be >= 0, got " << o.momentum);
  TRIAD_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
              "[optimizer] SGD nesterov needs momentum > 0 and dampening 0");
}

void SGD::step() {
  NoGradGuard no_grad;
  const bool momentum = options_.momentum != 0.0;
  size_t i = 0;
  for (const ParamGroup& g : groups_) {
    std::vector<SGDTensors> updates;  // the group's, in one call (one launch on a GPU)
    for (const Tensor& p : g.params) {
      if (momentum_.size() <= i) momentum_.emplace_back();
      if (const Tensor d = grad(p); d.defined()) {
        Tensor& buf = momentum_[i];
        const bool first = momentum && !buf.defined();
        if (first) buf = Tensor::empty(p.shape(), p.dtype(), p.device());
        updates.push_back({.param = p, .grad = d, .momentum_buffer = buf, .first = first});
      }
      ++i;
    }
    ops::sgd_(updates, {.lr = lr_,
                        .momentum = options_.momentum,
                        .dampening = options_.dampening,
                        .weight_decay = g.weight_decay,
                        .nesterov = options_.nesterov});
  }
}

}  // namespace triad::optim
