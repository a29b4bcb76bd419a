#!/usr/bin/env python3
"""PyTorch reference for triad's RLHF losses (src/rlhf/), written from their formulas.

What it produces
    tests/data/rlhf_reference.tns  -- one .tns file (the format of reference_common.py,
    whose writer and reader this script uses), everything float64 unless stated, holding for
    each loss its inputs, its outputs and the gradients of its differentiable inputs:
      logprobs/{logits (B,T,W), ids int64 (B,T), mask (B,T-1), classes int64 (),
                w_logp, w_entropy (B,T-1)} -> logprobs/{logp, entropy, grad_logits}
                where grad_logits = d sum(w_logp*logp + w_entropy*entropy) / d logits
      reward/{chosen, rejected (B,T), chosen_ids, rejected_ids int64, pad int64 ()}
                -> reward/{loss, chosen_scores, rejected_scores, accuracy, grad_chosen,
                   grad_rejected}
      actor/{logp, old_logp, advantages, mask} -> actor/{loss, clip_fraction, approx_kl,
                grad_logp}
      critic/{values, old_values, returns, mask} -> critic/{loss, clip_fraction,
                grad_values}
      kl_reward/{logp, ref_logp, score, mask} -> kl_reward/rewards
      gae/{values, rewards, mask} -> gae/{advantages, returns}
      grpo/{rewards, logp, old_logp, ref_logp, mask} -> grpo/{advantages, loss, kl,
                grad_logp}
      dpo/{policy_chosen, policy_rejected, reference_chosen, reference_rejected}
                -> dpo/{loss, chosen_rewards, rejected_rewards, grad_policy_chosen,
                   grad_policy_rejected}
    Constants: kl_coef 0.1, reward clip 5, PPO clips 0.2, gamma 1, lambda 0.95, GRPO group
    size 3, eps 1e-4, beta 0.04, DPO beta 0.1.

How to rerun
    pip install torch numpy        # only this script needs torch; triad itself never does
    python3 tests/reference/rlhf_reference.py          (from the repository root)

The formulas (each the Note of the triad header named)
    log-probs (rlhf/log_probs.h): log_softmax over the first `classes` columns of
        logits[:, :-1], gathered at ids[:, 1:]; entropy -sum p log p; both times mask.
    reward loss (rlhf/reward_loss.h, DeepSpeed-Chat's RewardModel.forward): per pair the
        span from the first differing token to the later of the two first pads (identical
        pair: the last position), mean of -logsigmoid(r_c - r_r) over it, mean over pairs;
        scores at the token before each first pad.
    PPO (rlhf/ppo_losses.h, DeepSpeed-Chat's actor_loss_fn / critic_loss_fn): masked token
        means over the batch of max(-A r, -A clamp(r, 0.8, 1.2)), r = exp((logp - old) m),
        and of 0.5 max((v - R)^2, (clamp(v, old - 0.2, old + 0.2) - R)^2).
    KL reward (rlhf/kl_reward.h): -kl_coef (logp - ref) on answer tokens, clamp(score,
        -5, 5) added at the last one. GAE (rlhf/gae.h): masked values and rewards, the
        trlx/DeepSpeed-Chat backward recursion.
    GRPO (rlhf/grpo.h): (r - mean) / (std + eps) per group (torch.std, unbiased); token
        mean of max(-A r, -A clamp(r)) + beta (exp(ref - logp) - (ref - logp) - 1).
    DPO (rlhf/dpo.h): mean -logsigmoid(beta ((pc - rc) - (pr - rr))).

Inputs are drawn from torch.manual_seed(7) in the order written below. The script checks
every loss's gradients with torch.autograd.gradcheck and re-reads the file it wrote.
"""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import write_and_check_tns  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "data", "rlhf_reference.tns")
D = torch.float64
KL_COEF, REWARD_CLIP, CLIP, CLIP_VALUE, GAMMA, LAM = 0.1, 5.0, 0.2, 0.2, 1.0, 0.95
GROUP, GRPO_EPS, GRPO_BETA, DPO_BETA = 3, 1e-4, 0.04, 0.1


def masked_mean(x, m):
    return (x * m).sum() / m.sum()


def log_probs(logits, ids, mask, classes):
    logp_all = F.log_softmax(logits[:, :-1, :classes], dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp * mask, entropy * mask


def reward_loss(rc, rr, c_ids, r_ids, pad):
    B, T = c_ids.shape
    loss, c_scores, r_scores = 0.0, [], []
    for i in range(B):
        c_pads = (c_ids[i] == pad).nonzero()
        c_ind = c_pads[0].item() if len(c_pads) else T
        diff = (c_ids[i] != r_ids[i]).nonzero()
        if len(diff) == 0:
            end, div, r_ind = T, T - 1, c_ind
        else:
            r_pads = (r_ids[i] == pad).nonzero()
            r_ind = r_pads[0].item() if len(r_pads) else T
            end, div = max(c_ind, r_ind), diff[0].item()
        loss = loss - F.logsigmoid(rc[i, div:end] - rr[i, div:end]).mean()
        c_scores.append(rc[i, c_ind - 1])
        r_scores.append(rr[i, r_ind - 1])
    return loss / B, torch.stack(c_scores), torch.stack(r_scores)


def actor_loss(logp, old, adv, m):
    log_ratio = (logp - old) * m
    ratio = torch.exp(log_ratio)
    pg1, pg2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)
    loss = masked_mean(torch.max(pg1, pg2), m)
    return loss, masked_mean((pg2 > pg1).to(D), m), 0.5 * masked_mean(log_ratio ** 2, m)


def critic_loss(v, old, ret, m):
    v_clip = torch.clamp(v, old - CLIP_VALUE, old + CLIP_VALUE)
    l1, l2 = (v - ret) ** 2, (v_clip - ret) ** 2
    return 0.5 * masked_mean(torch.max(l1, l2), m), masked_mean((l2 > l1).to(D), m)


def kl_rewards(logp, ref, score, m):
    r = -KL_COEF * (logp - ref) * m
    for b in range(r.shape[0]):
        last = m[b].nonzero()[-1].item()
        r[b, last] += torch.clamp(score[b], -REWARD_CLIP, REWARD_CLIP)
    return r


def gae(values, rewards, m):
    values, rewards = values * m, rewards * m
    last, advs = 0.0, []
    A = values.shape[1]
    for t in reversed(range(A)):
        next_v = values[:, t + 1] if t < A - 1 else 0.0
        delta = rewards[:, t] + GAMMA * next_v - values[:, t]
        last = delta + GAMMA * LAM * last
        advs.append(last)
    adv = torch.stack(advs[::-1], dim=1)
    return adv, adv + values


def grpo(rewards, logp, old, ref, m):
    g = rewards.view(-1, GROUP)
    adv = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + GRPO_EPS)).view(-1)
    ratio = torch.exp(logp - old)
    a = adv.unsqueeze(1)
    per_token = torch.max(-a * ratio, -a * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
    kl = torch.exp(ref - logp) - (ref - logp) - 1
    return adv, masked_mean(per_token + GRPO_BETA * kl, m), masked_mean(kl, m)


def dpo(pc, pr, rc, rr):
    chosen, rejected = DPO_BETA * (pc - rc), DPO_BETA * (pr - rr)
    return -F.logsigmoid(chosen - rejected).mean(), chosen.detach(), rejected.detach()


def leaf(t):
    return t.clone().requires_grad_(True)


def main():
    torch.manual_seed(7)
    out = []

    def put(name, t):
        out.append((name, t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)))

    # ---- log-probs: W = 7 columns, 5 classes, a masked position
    B, T, W, V = 2, 5, 7, 5
    logits = leaf(torch.randn(B, T, W, dtype=D) * 2)
    ids = torch.randint(0, V, (B, T))
    mask = torch.ones(B, T - 1, dtype=D)
    mask[0, 2] = 0
    w_logp, w_ent = torch.randn(B, T - 1, dtype=D), torch.randn(B, T - 1, dtype=D)
    logp, ent = log_probs(logits, ids, mask, V)
    (w_logp * logp + w_ent * ent).sum().backward()
    assert torch.autograd.gradcheck(lambda x: log_probs(x, ids, mask, V), (leaf(logits.detach()),))
    for k, v in [("logits", logits), ("ids", ids), ("mask", mask), ("classes", torch.tensor(V)),
                 ("w_logp", w_logp), ("w_entropy", w_ent), ("logp", logp), ("entropy", ent),
                 ("grad_logits", logits.grad)]:
        put("logprobs/" + k, v)

    # ---- reward loss: divergent pairs of unequal ends, an identical pair, pad 0
    c_ids = torch.tensor([[3, 4, 5, 6, 7, 0, 0], [3, 4, 5, 0, 0, 0, 0], [3, 3, 3, 3, 0, 0, 0],
                          [3, 8, 8, 8, 8, 8, 8]])
    r_ids = torch.tensor([[3, 4, 9, 0, 0, 0, 0], [3, 4, 8, 8, 8, 8, 0], [3, 3, 3, 3, 0, 0, 0],
                          [3, 8, 9, 9, 0, 0, 0]])
    rc, rr = leaf(torch.randn(4, 7, dtype=D)), leaf(torch.randn(4, 7, dtype=D))
    loss, cs, rs = reward_loss(rc, rr, c_ids, r_ids, 0)
    loss.backward()
    assert torch.autograd.gradcheck(lambda a, b: reward_loss(a, b, c_ids, r_ids, 0)[0],
                                    (leaf(rc.detach()), leaf(rr.detach())))
    for k, v in [("chosen", rc), ("rejected", rr), ("chosen_ids", c_ids), ("rejected_ids", r_ids),
                 ("pad", torch.tensor(0)), ("loss", loss), ("chosen_scores", cs), ("rejected_scores", rs),
                 ("accuracy", (cs > rs).to(D).mean()), ("grad_chosen", rc.grad), ("grad_rejected", rr.grad)]:
        put("reward/" + k, v)

    # ---- PPO actor: ratios inside and outside the clip range, one tie (ratio exactly 1)
    old = torch.randn(2, 6, dtype=D)
    logp = leaf(old + torch.tensor([[0.1, -0.3, 0.35, 0.0, -0.05, 0.5], [0.25, -0.25, 0.15, 0.3, -0.1, 0.2]],
                                   dtype=D))
    adv = torch.randn(2, 6, dtype=D)
    m = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]], dtype=D)
    loss, clipfrac, approx_kl = actor_loss(logp, old, adv, m)
    loss.backward()
    assert torch.autograd.gradcheck(lambda x: actor_loss(x, old, adv, m)[0], (leaf(logp.detach()),))
    for k, v in [("logp", logp), ("old_logp", old), ("advantages", adv), ("mask", m), ("loss", loss),
                 ("clip_fraction", clipfrac), ("approx_kl", approx_kl), ("grad_logp", logp.grad)]:
        put("actor/" + k, v)

    # ---- PPO critic
    old_v = torch.randn(2, 6, dtype=D)
    v = leaf(old_v + torch.tensor([[0.1, -0.3, 0.35, 0.05, -0.05, 0.5], [0.25, -0.25, 0.15, 0.3, -0.1, 0.2]],
                                  dtype=D))
    ret = torch.randn(2, 6, dtype=D)
    loss, clipfrac = critic_loss(v, old_v, ret, m)
    loss.backward()
    assert torch.autograd.gradcheck(lambda x: critic_loss(x, old_v, ret, m)[0], (leaf(v.detach()),))
    for k, val in [("values", v), ("old_values", old_v), ("returns", ret), ("mask", m), ("loss", loss),
                   ("clip_fraction", clipfrac), ("grad_values", v.grad)]:
        put("critic/" + k, val)

    # ---- KL-shaped reward and GAE (no gradients)
    lp, ref = torch.randn(3, 5, dtype=D), torch.randn(3, 5, dtype=D)
    score = torch.tensor([7.5, -0.4, -6.0], dtype=D)
    am = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=D)
    for k, val in [("logp", lp), ("ref_logp", ref), ("score", score), ("mask", am),
                   ("rewards", kl_rewards(lp, ref, score, am))]:
        put("kl_reward/" + k, val)
    values, rewards = torch.randn(3, 5, dtype=D), torch.randn(3, 5, dtype=D)
    a, r = gae(values, rewards, am)
    for k, val in [("values", values), ("rewards", rewards), ("mask", am), ("advantages", a), ("returns", r)]:
        put("gae/" + k, val)

    # ---- GRPO: two prompts, three answers each
    g_rewards = torch.tensor([1.0, 0.0, 0.5, 2.0, 2.0, -1.0], dtype=D)
    g_old, g_ref = torch.randn(6, 4, dtype=D), torch.randn(6, 4, dtype=D)
    g_logp = leaf(g_old + 0.3 * torch.randn(6, 4, dtype=D))
    g_mask = torch.ones(6, 4, dtype=D)
    g_mask[1, 3] = g_mask[4, 2:] = 0
    g_adv, loss, kl = grpo(g_rewards, g_logp, g_old, g_ref, g_mask)
    loss.backward()
    assert torch.autograd.gradcheck(lambda x: grpo(g_rewards, x, g_old, g_ref, g_mask)[1], (leaf(g_logp.detach()),))
    for k, val in [("rewards", g_rewards), ("logp", g_logp), ("old_logp", g_old), ("ref_logp", g_ref),
                   ("mask", g_mask), ("advantages", g_adv), ("loss", loss), ("kl", kl), ("grad_logp", g_logp.grad)]:
        put("grpo/" + k, val)

    # ---- DPO
    pc, pr = leaf(-10 + 3 * torch.randn(4, dtype=D)), leaf(-10 + 3 * torch.randn(4, dtype=D))
    rc_, rr_ = -10 + 3 * torch.randn(4, dtype=D), -10 + 3 * torch.randn(4, dtype=D)
    loss, cr, rj = dpo(pc, pr, rc_, rr_)
    loss.backward()
    assert torch.autograd.gradcheck(lambda a, b: dpo(a, b, rc_, rr_)[0], (leaf(pc.detach()), leaf(pr.detach())))
    for k, val in [("policy_chosen", pc), ("policy_rejected", pr), ("reference_chosen", rc_),
                   ("reference_rejected", rr_), ("loss", loss), ("chosen_rewards", cr), ("rejected_rewards", rj),
                   ("grad_policy_chosen", pc.grad), ("grad_policy_rejected", pr.grad)]:
        put("dpo/" + k, val)

    write_and_check_tns(OUT_PATH, out)
    print(f"wrote {OUT_PATH}: {len(out)} tensors, {os.path.getsize(OUT_PATH)} bytes")


if __name__ == "__main__":
    main()
