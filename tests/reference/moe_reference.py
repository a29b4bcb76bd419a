#!/usr/bin/env python3
"""PyTorch reference for triad's Mixture-of-Experts gate (tests/nn/test_moe.cpp).

What it produces
    tests/data/moe_reference.tns, one .tns file (format: reference_common.py) holding
      capacity/cases     int64 (N, 4)  rows [S, E, k, min_capacity]
      capacity/factors   float64 (N,)  capacity_factor of each row
      capacity/values    int64 (N,)    DeepSpeed's _capacity for each row
    and for each gating case <c> (see CASES):
      <c>/options        float64 (4,)  [k, capacity_factor, min_capacity, drop_tokens]
      <c>/logits         float32 (S, E)
      <c>/noise          float64 (S, E)  Gumbel noise on the logits that pick the sampled
                                         choice (top-1 RSample, top-2's second), if any
      <c>/priority       float64 (S, E)  top-1 random token selection's uniform draws, if any
      <c>/capacity       int64 ()
      <c>/expert         int64 (S, k)    the expert of each choice (k >= 3: by descending gate)
      <c>/location       int64 (S, k)    its slot in that expert, -1 when dropped
      <c>/exp_counts     int64 (E,)      choices each expert received before capacity
      <c>/combine        float32 (S, E, C)  DeepSpeed's combine_weights
      <c>/l_aux          float64 ()      DeepSpeed's l_aux (computed in float32)
      <c>/l_aux_megatron float64 ()      Megatron's switch load-balancing loss, coeff 1
      <c>/z_loss         float64 ()      mean(logsumexp(logits)^2)
      <c>/probe          float32 (S, E)  fixed weights R for the gradient below
      <c>/grad_logits    float32 (S, E)  d/d logits of sum(combine.sum(-1) * R)
                                         + 0.5 l_aux + 0.25 z_loss

How to rerun
    pip install torch numpy        # only this script needs torch; triad itself never does
    python3 tests/reference/moe_reference.py        (from the repository root)

The gating functions below are written from DeepSpeed's published top1gating, top2gating
and topkgating (deepspeed/moe/sharded_moe.py), with their random draws given as inputs:
    gates = softmax(logits); C = ceil(S / E * cf * k) (float32 arithmetic), at least
    min_capacity; dropless: C = the largest count (top-1: at most S).
    top-1: mask1 = one_hot(argmax(gates)) (RSample: argmax(logits + noise)); l_aux =
      E * sum(mean(gates) * mean(mask1)); with RTS each expert keeps the C tokens of largest
      mask1 * uniform (torch.topk over tokens); locations = cumsum(mask1) - 1; combine =
      gates * mask1 at one_hot(location).
      Without RTS DeepSpeed runs torch.topk over the 0/1 mask itself, which leaves the choice
      among equal entries unspecified; the reference (and triad) keep the first C tokens.
    top-2: the first choice by argmax(gates); the second by argmax(logits + noise) with the
      first masked; locations2 += the first choices' counts; l_aux = E^2 mean(me * ce) over
      first choices; positional drops (location < C); the two gates divided by their sum
      clamped by float32's eps.
    top-k: torch.topk(gates, k); l_aux = E^2 / k mean(me * ce) over all choices; dropping
      keeps each expert's C choices of largest gate ("probs" policy); locations =
      cumsum(mask) - 1; gates divided by their sum over kept choices (clamped by eps).
Noise is added in float64 (triad routes in double); the draws come from a generator seeded
1234, as do the logits (N(0, 1.5)) and the probes.
"""

import os

import numpy as np
import torch
import torch.nn.functional as F

from reference_common import write_and_check_tns

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "data", "moe_reference.tns")

# name, S, E, k, capacity_factor, min_capacity, drop_tokens, noise (Gumbel), priority (RTS)
CASES = [
    ("top1", 16, 4, 1, 1.0, 2, True, False, False),
    ("top1_rts", 16, 4, 1, 1.0, 2, True, False, True),
    ("top1_rsample_rts", 16, 4, 1, 0.75, 2, True, True, True),
    ("top1_dropless", 16, 4, 1, 1.0, 4, False, False, False),
    ("top2", 16, 4, 2, 0.75, 2, True, False, False),
    ("top2_sampled", 16, 4, 2, 1.0, 2, True, True, False),
    ("top2_dropless", 16, 4, 2, 1.0, 4, False, True, False),
    ("top3", 16, 6, 3, 0.75, 2, True, False, False),
    ("top3_dropless", 16, 6, 3, 1.0, 4, False, False, False),
]

# capacity edges: S, E, k, capacity_factor, min_capacity
CAPACITY_CASES = [
    (25, 2, 1, 1.2, 4),    # float32 gives 16 (12.5 * 1.2 rounds up); exactly, 15
    (50, 2, 1, 2.2, 4),    # float32 gives 55; the same product in double gives 56
    (12, 4, 1, 1.0, 4),    # ceil 3, raised to min_capacity
    (13, 4, 1, 1.0, 0),    # 3.25 -> 4
    (12, 4, 2, 1.0, 0),    # 6
    (10, 3, 1, 0.3, 0),
    (7, 3, 2, 1.5, 0),
    (1, 8, 1, 1.0, 0),     # a fraction of a token per expert still gets one slot
    (1000, 7, 2, 1.25, 4),
    (4096, 64, 1, 1.0, 4),
    (30, 7, 3, 0.9, 2),
]


def capacity_of(S, E, k, cf, min_capacity):
    """DeepSpeed's _capacity: torch.tensor(cf * k) is float32, and so is the product."""
    c = torch.ceil((S / E) * torch.tensor(cf * k)).to(torch.int64)
    return max(int(c), min_capacity)


def one_hot(idx, n):
    return F.one_hot(idx, num_classes=n)


def top1(logits, cf, min_capacity, drop, noise, priority):
    S, E = logits.shape
    gates = F.softmax(logits, dim=1)
    choose = logits.double() + noise if noise is not None else gates
    mask1 = one_hot(torch.argmax(choose, dim=1), E)
    exp_counts = mask1.sum(0)
    C = capacity_of(S, E, 1, cf, min_capacity) if drop else min(int(exp_counts.max()), S)
    me, ce = gates.mean(0), mask1.float().mean(0)
    l_aux = torch.sum(me * ce) * E
    if priority is not None:
        top_idx = torch.topk(mask1 * priority, k=min(C, S), dim=0)[1]
        mask1 = mask1 * torch.zeros_like(mask1).scatter_(0, top_idx, 1)
    else:
        mask1 = mask1 * torch.lt(torch.cumsum(mask1, 0) - 1, C)
    locations1_s = torch.sum((torch.cumsum(mask1, 0) - 1) * mask1, dim=1)
    combine = (gates * mask1.float()).unsqueeze(2) * one_hot(locations1_s, C).float().unsqueeze(1)
    expert = torch.argmax(choose, dim=1).unsqueeze(1)
    location = torch.where(mask1.sum(1) > 0, locations1_s, -1).unsqueeze(1)
    all_choices = one_hot(expert[:, 0], E)
    return combine, C, exp_counts, l_aux, expert, location, all_choices


def top2(logits, cf, min_capacity, drop, noise):
    S, E = logits.shape
    gates = F.softmax(logits, dim=1)
    indices1 = torch.argmax(gates, dim=1)
    mask1 = one_hot(indices1, E)
    noisy = logits.double() + noise if noise is not None else logits
    indices2 = torch.argmax(noisy.masked_fill(mask1.bool(), float("-inf")), dim=1)
    mask2 = one_hot(indices2, E)
    locations1 = torch.cumsum(mask1, 0) - 1
    locations2 = torch.cumsum(mask2, 0) - 1 + mask1.sum(0, keepdim=True)
    me, ce = gates.mean(0), mask1.float().mean(0)
    l_aux = torch.mean(me * ce) * E * E
    exp_counts = (mask1 + mask2).sum(0)
    if drop:
        C = capacity_of(S, E, 2, cf, min_capacity)
        mask1 = mask1 * torch.lt(locations1, C)
        mask2 = mask2 * torch.lt(locations2, C)
    else:
        C = int(exp_counts.max())
    loc1_s = torch.sum(locations1 * mask1, 1)
    loc2_s = torch.sum(locations2 * mask2, 1)
    g1 = (gates * mask1.float()).sum(1)
    g2 = (gates * mask2.float()).sum(1)
    denom = torch.clamp(g1 + g2, min=torch.finfo(g1.dtype).eps)
    g1, g2 = g1 / denom, g2 / denom
    combine = (g1.unsqueeze(1) * mask1.float()).unsqueeze(2) * one_hot(loc1_s, C).float().unsqueeze(1) + \
        (g2.unsqueeze(1) * mask2.float()).unsqueeze(2) * one_hot(loc2_s, C).float().unsqueeze(1)
    expert = torch.stack([indices1, indices2], 1)
    location = torch.stack([torch.where(mask1.sum(1) > 0, loc1_s, -1), torch.where(mask2.sum(1) > 0, loc2_s, -1)], 1)
    return combine, C, exp_counts, l_aux, expert, location, one_hot(indices1, E) + one_hot(indices2, E)


def topk(logits, k, cf, min_capacity, drop):
    S, E = logits.shape
    gates = F.softmax(logits, dim=1)
    top_gate, top_idx = torch.topk(gates, k=k, dim=1)
    mask = torch.zeros_like(gates, dtype=torch.bool).scatter_(1, top_idx, True)
    all_choices = mask.long()
    exp_counts = mask.sum(0)
    me, ce = gates.mean(0), mask.float().mean(0)
    l_aux = torch.mean(me * ce) * E * E / k
    if drop:
        C = capacity_of(S, E, k, cf, min_capacity)
        masked = torch.zeros_like(gates).scatter(1, top_idx, top_gate)
        _, keep = torch.topk(masked, k=min(C, S), dim=0, sorted=False)
        mask &= torch.zeros_like(gates, dtype=torch.bool).scatter_(0, keep, True)
    else:
        C = int(exp_counts.max())
    locations = torch.cumsum(mask, 0) - 1
    gm = gates * mask
    gm = gm / torch.clamp(gm.sum(-1, keepdim=True), min=torch.finfo(gm.dtype).eps)
    combine = gm.unsqueeze(2) * one_hot(locations * mask, C).float()
    location = torch.where(mask.gather(1, top_idx), locations.gather(1, top_idx), -1)
    return combine, C, exp_counts, l_aux, top_idx, location, all_choices


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    tensors = []
    caps = [capacity_of(*c) for c in CAPACITY_CASES]
    assert caps[:2] == [16, 55] and int(np.ceil(50 / 2 * 2.2)) == 56, "the float32 edges moved"
    tensors += [("capacity/cases", np.array([[c[0], c[1], c[2], c[4]] for c in CAPACITY_CASES], dtype=np.int64)),
                ("capacity/factors", np.array([c[3] for c in CAPACITY_CASES], dtype=np.float64)),
                ("capacity/values", np.array(caps, dtype=np.int64))]
    for name, S, E, k, cf, min_capacity, drop, with_noise, with_priority in CASES:
        logits = (torch.randn(S, E, generator=gen) * 1.5).requires_grad_(True)
        noise = priority = None
        if with_noise:
            u = torch.rand(S, E, generator=gen, dtype=torch.float64).clamp(min=torch.finfo(torch.float64).tiny)
            noise = -torch.log(-torch.log(u))
        if with_priority:
            priority = torch.rand(S, E, generator=gen, dtype=torch.float64)
        probe = torch.randn(S, E, generator=gen)
        if k == 1:
            out = top1(logits, cf, min_capacity, drop, noise, priority)
        elif k == 2:
            out = top2(logits, cf, min_capacity, drop, noise)
        else:
            out = topk(logits, k, cf, min_capacity, drop)
        combine, C, exp_counts, l_aux, expert, location, all_choices = out
        gates = F.softmax(logits, dim=1)
        megatron = torch.sum(gates.sum(0) * all_choices.sum(0).float()) * E / (S * S * k)
        z_loss = torch.logsumexp(logits, dim=1).square().mean()
        loss = (combine.sum(-1) * probe).sum() + 0.5 * l_aux + 0.25 * z_loss
        loss.backward()
        dropped = int((location < 0).sum())
        print(f"{name}: capacity {C}, counts {exp_counts.tolist()}, dropped {dropped} of {S * k}, "
              f"l_aux {l_aux.item():.6f}, megatron {megatron.item():.6f}, z {z_loss.item():.6f}")
        tensors += [(f"{name}/options", np.array([k, cf, min_capacity, float(drop)], dtype=np.float64)),
                    (f"{name}/logits", logits.detach().numpy())]
        if noise is not None:
            tensors.append((f"{name}/noise", noise.numpy()))
        if priority is not None:
            tensors.append((f"{name}/priority", priority.numpy()))
        tensors += [(f"{name}/capacity", np.array(C, dtype=np.int64)),
                    (f"{name}/expert", expert.numpy().astype(np.int64)),
                    (f"{name}/location", location.numpy().astype(np.int64)),
                    (f"{name}/exp_counts", exp_counts.numpy().astype(np.int64)),
                    (f"{name}/combine", combine.detach().numpy()),
                    (f"{name}/l_aux", np.array(l_aux.item(), dtype=np.float64)),
                    (f"{name}/l_aux_megatron", np.array(megatron.item(), dtype=np.float64)),
                    (f"{name}/z_loss", np.array(z_loss.item(), dtype=np.float64)),
                    (f"{name}/probe", probe.numpy()),
                    (f"{name}/grad_logits", logits.grad.numpy())]
    write_and_check_tns(OUT_PATH, tensors)
    print(f"wrote {OUT_PATH}: {len(tensors)} tensors, {os.path.getsize(OUT_PATH)} bytes (round-trip ok)")


if __name__ == "__main__":
    main()
