#include "rlhf/grpo.h"

#include <cmath>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "rlhf/host_rows.h"
#include "tensor/ops.h"

namespace triad::rlhf {

Tensor grpo_advantages(const Tensor& rewards, int64_t group_size, double eps) {
  TRIAD_CHECK(rewards.dim() == 1, "grpo_advantages: expected rewards (P G,), got " << shape_str(rewards.shape()));
  const int64_t n = rewards.size(0);
  TRIAD_CHECK(group_size >= 2 && n > 0 && n % group_size == 0,
              "grpo_advantages: group_size must be >= 2 and divide the " << n << " rewards, got " << group_size);
  TRIAD_CHECK(eps > 0, "grpo_advantages: eps must be positive, got " << eps);
  const std::vector<double> r = host_values(rewards);
  std::vector<double> adv(r.size());
  for (int64_t g0 = 0; g0 < n; g0 += group_size) {
    double mean = 0, ss = 0;
    for (int64_t i = g0; i < g0 + group_size; ++i) mean += r[size_t(i)];
    mean /= double(group_size);
    for (int64_t i = g0; i < g0 + group_size; ++i) ss += (r[size_t(i)] - mean) * (r[size_t(i)] - mean);
    const double std = std::sqrt(ss / double(group_size - 1));
    for (int64_t i = g0; i < g0 + group_size; ++i) adv[size_t(i)] = (r[size_t(i)] - mean) / (std + eps);
  }
  return tensor_like(adv, rewards.shape(), rewards);
}

Tensor k3_kl(const Tensor& logp, const Tensor& ref_logp) {
  TRIAD_CHECK(logp.shape() == ref_logp.shape(),
              "k3_kl: shapes " << shape_str(logp.shape()) << " and " << shape_str(ref_logp.shape()) << " differ");
  const Tensor d = sub(ops::to(ops::to(detach(ref_logp), logp.device()), logp.dtype()), logp);
  return add(sub(exp(d), d), -1.0);
}

GrpoLoss grpo_loss(const Tensor& logp, const Tensor& old_logp, const Tensor& ref_logp, const Tensor& advantages,
                   const Tensor& mask, double beta, double clip, double tokens) {
  TRIAD_CHECK(logp.dim() == 2 && old_logp.shape() == logp.shape() && ref_logp.shape() == logp.shape() &&
                  advantages.shape() == Shape{logp.size(0)},
              "grpo_loss: expected logp, old_logp, ref_logp (B, A) and advantages (B,), got "
                  << shape_str(logp.shape()) << ", " << shape_str(old_logp.shape()) << ", "
                  << shape_str(ref_logp.shape()) << " and " << shape_str(advantages.shape()));
  TRIAD_CHECK(clip >= 0 && clip < 1 && beta >= 0,
              "grpo_loss: clip must be in [0, 1) and beta >= 0, got clip " << clip << ", beta " << beta);
  const Tensor m = mask_like(mask, logp, "grpo_loss");
  const double n = tokens > 0 ? tokens : mask_tokens(m, "grpo_loss");
  const Tensor neg_adv = ops::unsqueeze(ops::neg(ops::to(ops::to(detach(advantages), logp.device()), logp.dtype())), 1);
  const Tensor ratio = exp(sub(logp, ops::to(ops::to(detach(old_logp), logp.device()), logp.dtype())));
  // -min(ratio adv, clamp(ratio) adv) = max(-adv ratio, -adv clamp(ratio))
  const Tensor unclipped = mul(ratio, neg_adv), clipped = mul(clamp(ratio, 1.0 - clip, 1.0 + clip), neg_adv);
  const Tensor kl = k3_kl(logp, ref_logp);
  GrpoLoss out;
  out.loss = masked_mean(add(maximum(unclipped, clipped), mul(kl, beta)), m, "grpo_loss", n);
  NoGradGuard no_grad;
  out.kl = masked_mean(detach(kl), m, "grpo_loss", n);
  const Tensor d = ops::sub(detach(clipped), detach(unclipped));
  out.clip_fraction = masked_mean(ops::relu_backward(d, Tensor::ones(d.shape(), d.dtype(), d.device())), m, "grpo_loss", n);
  return out;
}

}  // namespace triad::rlhf
