#include "rlhf/dpo.h"

#include "autograd/functions.h"
#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::rlhf {

DpoLoss dpo_loss(const Tensor& policy_chosen, const Tensor& policy_rejected, const Tensor& reference_chosen,
                 const Tensor& reference_rejected, double beta) {
  const Shape& s = policy_chosen.shape();
  TRIAD_CHECK(s.size() == 1 && s[0] > 0 && policy_rejected.shape() == s && reference_chosen.shape() == s &&
                  reference_rejected.shape() == s,
              "dpo_loss: expected four (B,) log-prob sums, got "
                  << shape_str(s) << ", " << shape_str(policy_rejected.shape()) << ", "
                  << shape_str(reference_chosen.shape()) << " and " << shape_str(reference_rejected.shape()));
  TRIAD_CHECK(beta > 0, "dpo_loss: beta must be positive, got " << beta);
  auto constant = [&](const Tensor& t) {
    return ops::to(ops::to(detach(t), policy_chosen.device()), policy_chosen.dtype());
  };
  const Tensor chosen = mul(sub(policy_chosen, constant(reference_chosen)), beta);
  const Tensor rejected = mul(sub(policy_rejected, constant(reference_rejected)), beta);
  DpoLoss out;
  out.loss = neg(mean(log_sigmoid(sub(chosen, rejected))));
  out.chosen_rewards = ops::to(ops::to(detach(chosen), Device::cpu()), DType::f64);
  out.rejected_rewards = ops::to(ops::to(detach(rejected), Device::cpu()), DType::f64);
  const std::vector<double> c = out.chosen_rewards.to_vector<double>(), r = out.rejected_rewards.to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    out.accuracy += c[i] > r[i];
    out.margin += c[i] - r[i];
  }
  out.accuracy /= double(c.size());
  out.margin /= double(c.size());
  return out;
}

}  // namespace triad::rlhf
