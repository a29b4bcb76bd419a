#include "rlhf/ppo_losses.h"

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

void check_shapes(const char* what, const Tensor& x, const Tensor& a, const Tensor& b) {
  TRIAD_CHECK(x.dim() == 2 && a.shape() == x.shape() && b.shape() == x.shape(),
              what << ": expected three (B, A) tensors, got " << shape_str(x.shape()) << ", " << shape_str(a.shape())
                   << " and " << shape_str(b.shape()));
  TRIAD_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64,
              what << ": expected f32 or f64, got " << dtype_name(x.dtype()));
}

// The masked token mean of 1 where a > b, else 0 (no gradient).
Tensor fraction_greater(const Tensor& a, const Tensor& b, const Tensor& mask, const char* what, double tokens) {
  NoGradGuard no_grad;
  const Tensor d = ops::sub(detach(a), detach(b));
  return masked_mean(ops::relu_backward(d, Tensor::ones(d.shape(), d.dtype(), d.device())), mask, what, tokens);
}

Tensor constant(const Tensor& t, const Tensor& like) {
  return ops::to(ops::to(detach(t), like.device()), like.dtype());
}

}  // namespace

ActorLoss ppo_actor_loss(const Tensor& logp, const Tensor& old_logp, const Tensor& advantages, const Tensor& mask,
                         double clip, double tokens) {
  check_shapes("ppo_actor_loss", logp, old_logp, advantages);
  TRIAD_CHECK(clip >= 0 && clip < 1, "ppo_actor_loss: clip must be in [0, 1), got " << clip);
  const Tensor m = mask_like(mask, logp, "ppo_actor_loss");
  const double n = tokens > 0 ? tokens : mask_tokens(m, "ppo_actor_loss");
  const Tensor neg_adv = ops::neg(constant(advantages, logp));
  const Tensor log_ratio = mul(sub(logp, constant(old_logp, logp)), m);
  const Tensor ratio = exp(log_ratio);
  const Tensor unclipped = mul(ratio, neg_adv), clipped = mul(clamp(ratio, 1.0 - clip, 1.0 + clip), neg_adv);
  ActorLoss out;
  out.loss = masked_mean(maximum(unclipped, clipped), m, "ppo_actor_loss", n);
  out.clip_fraction = fraction_greater(clipped, unclipped, m, "ppo_actor_loss", n);
  NoGradGuard no_grad;
  out.approx_kl = ops::mul(masked_mean(ops::mul(detach(log_ratio), detach(log_ratio)), m, "ppo_actor_loss", n), 0.5);
  return out;
}

CriticLoss ppo_critic_loss(const Tensor& values, const Tensor& old_values, const Tensor& returns, const Tensor& mask,
                           double clip, double tokens) {
  check_shapes("ppo_critic_loss", values, old_values, returns);
  TRIAD_CHECK(clip >= 0, "ppo_critic_loss: clip must be >= 0, got " << clip);
  const Tensor m = mask_like(mask, values, "ppo_critic_loss");
  const double n = tokens > 0 ? tokens : mask_tokens(m, "ppo_critic_loss");
  const Tensor old = constant(old_values, values), ret = constant(returns, values);
  const Tensor v_clip = clamp(values, ops::add(old, -clip), ops::add(old, clip));
  const Tensor d1 = sub(values, ret), d2 = sub(v_clip, ret);
  const Tensor loss1 = mul(d1, d1), loss2 = mul(d2, d2);
  CriticLoss out;
  out.loss = mul(masked_mean(maximum(loss1, loss2), m, "ppo_critic_loss", n), 0.5);
  out.clip_fraction = fraction_greater(loss2, loss1, m, "ppo_critic_loss", n);
  return out;
}

}  // namespace triad::rlhf
