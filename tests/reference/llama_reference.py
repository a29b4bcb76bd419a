#!/usr/bin/env python3
"""PyTorch reference for triad's Llama tests.

What it produces
    tests/data/llama_reference.tns  -- one .tns file (the format of gpt_reference.py) holding:
      config             int64 (9,)   = [n_layer, n_head, n_kv_head, d_model, intermediate,
                                         vocab, max_seq_len, B, T]
      config_f           float64 (2,) = [rms_norm_eps, rope_theta]
      idx, targets       int64 (B, T) (targets contain -100 = ignored positions)
      param/<name>       float32      initial weights (the exact values everything below uses)
      logits             float32 (B, T, V)  float64 forward, rounded to float32 for storage
      loss               float64 ()   float64 forward (mean cross-entropy, ignore_index=-100)
      grad/<name>        float32      d loss / d param, computed in float64, stored as float32
      train/losses       float32 (10,) loss before each of 10 AdamW steps (float32 training)
      train/grad_norms   float32 (10,) global grad L2 norm before clipping, each step
      final/<name>       float32      every parameter after the 10 steps

How to rerun
    pip install torch numpy        # only this script needs torch; triad itself never does
    python3 tests/reference/llama_reference.py        (from the repository root)

    Like gpt_reference.py it checks its float64 gradients against central finite
    differences and re-reads the file it wrote.

The model (Llama, written here with plain torch ops, no HF; hd = C / NH)
    x = embed[idx]                                       (no position table)
    per block (pre-norm):  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    logits = norm_f(x) @ head.weight^T                   (untied head)
    RMSNorm(x) = x / sqrt(mean(x^2, last dim) + eps) * weight
    attn: q = x Wq^T (NH heads), k = x Wk^T, v = x Wv^T (NKV heads each), heads via
          (B,T,n,hd)->(B,n,T,hd); rotary positions on q and k in Hugging Face's rotate_half
          layout: inv_freq_i = theta^(-2i/hd), angle = t * inv_freq, emb = cat(angle, angle),
          q' = q cos(emb) + rotate_half(q) sin(emb), rotate_half(x) = cat(-x2, x1);
          key/value head j serves query heads j*NH/NKV .. (j+1)*NH/NKV - 1 (HF's repeat_kv);
          softmax(q k^T / sqrt(hd) with causal mask) @ v; back to (B,T,NH*hd); o projection
    mlp:  down(silu(gate(x)) * up(x))
    No biases anywhere.

Initialisation (one CPU generator seeded 1234, drawn in parameter order, float32)
    embed ~ N(0, 1); every projection and the head ~ N(0, 1/sqrt(in_features)) (large
    enough that attention is far from uniform, so the rotary positions matter); norm
    weights = 1 + 0.1*N(0,1). Then idx ~ U[0,V), targets ~ U[0,V), and
    targets[0, 0:3] = targets[2, 5] = -100.

Training (float32, CPU, single thread): as gpt_reference.py, 10 steps on the same batch:
    clip_grad_norm_(1.0), AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8), weight decay 0.1 on
    the 2-D parameters (embed, head, projections), 0 on the norms.
"""

import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from gpt_reference import read_tns, write_tns

L, NH, NKV, C, I, V, MAXT, B, T = 2, 4, 2, 32, 86, 128, 32, 4, 16
HD = C // NH
RMS_EPS, ROPE_THETA = 1e-5, 10000.0
SEED = 1234
STEPS = 10
LR, BETAS, ADAM_EPS, WD = 1e-3, (0.9, 0.95), 1e-8, 0.1
CLIP = 1.0
IGNORE = -100

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "data", "llama_reference.tns")


def param_specs():
    """(name, shape, kind) in the model's order. kind picks the initialiser."""
    specs = [("embed.weight", (V, C), "embed")]
    for i in range(L):
        p = f"blocks.{i}."
        specs += [
            (p + "norm1.weight", (C,), "norm"),
            (p + "attn.q.weight", (NH * HD, C), "w"),
            (p + "attn.k.weight", (NKV * HD, C), "w"),
            (p + "attn.v.weight", (NKV * HD, C), "w"),
            (p + "attn.o.weight", (C, NH * HD), "w"),
            (p + "norm2.weight", (C,), "norm"),
            (p + "mlp.gate.weight", (I, C), "w"),
            (p + "mlp.up.weight", (I, C), "w"),
            (p + "mlp.down.weight", (C, I), "w"),
        ]
    specs += [("norm_f.weight", (C,), "norm"), ("head.weight", (V, C), "w")]
    return specs


def init_params(gen):
    params = {}
    for name, shape, kind in param_specs():
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind == "embed":
            t = z
        elif kind == "w":
            t = z / math.sqrt(shape[1])
        elif kind == "norm":
            t = 1.0 + 0.1 * z
        else:
            raise AssertionError(kind)
        params[name] = t.contiguous()
    return params


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w


def rotary_tables(tn, dtype):
    """cos, sin (T, HD), computed in float64 and rounded to dtype."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    angle = torch.outer(torch.arange(tn, dtype=torch.float64), inv_freq)
    emb = torch.cat((angle, angle), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, n, t, d = x.shape
    return x[:, :, None, :, :].expand(b, n, n_rep, t, d).reshape(b, n * n_rep, t, d)


def attention(h, P, p):
    Bn, Tn, _ = h.shape
    q = F.linear(h, P[p + "attn.q.weight"]).view(Bn, Tn, NH, HD).transpose(1, 2)
    k = F.linear(h, P[p + "attn.k.weight"]).view(Bn, Tn, NKV, HD).transpose(1, 2)
    v = F.linear(h, P[p + "attn.v.weight"]).view(Bn, Tn, NKV, HD).transpose(1, 2)
    cos, sin = rotary_tables(Tn, h.dtype)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k, v = repeat_kv(k, NH // NKV), repeat_kv(v, NH // NKV)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(HD)
    mask = torch.ones(Tn, Tn, dtype=torch.bool).triu(diagonal=1)
    att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(Bn, Tn, NH * HD)
    return F.linear(y, P[p + "attn.o.weight"])


def mlp(h, P, p):
    return F.linear(F.silu(F.linear(h, P[p + "mlp.gate.weight"])) * F.linear(h, P[p + "mlp.up.weight"]),
                    P[p + "mlp.down.weight"])


def forward(P, idx, targets):
    """Returns (logits (B,T,V), loss ())."""
    x = P["embed.weight"][idx]
    for i in range(L):
        p = f"blocks.{i}."
        x = x + attention(rms_norm(x, P[p + "norm1.weight"]), P, p)
        x = x + mlp(rms_norm(x, P[p + "norm2.weight"]), P, p)
    logits = F.linear(rms_norm(x, P["norm_f.weight"]), P["head.weight"])
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=IGNORE, reduction="mean")
    return logits, loss


def finite_difference_check(P64, grads, idx, targets, gen, eps=1e-6):
    """Central differences on the two largest-|grad| entries and two random entries of every
    parameter: rows of (name, index, analytic, finite difference, |difference|, is_top)."""
    rows = []
    with torch.no_grad():
        for name, t in P64.items():
            g = grads[name].reshape(-1)
            flat = t.view(-1)
            picks = torch.topk(g.abs(), 2).indices.tolist()
            picks += torch.randint(0, flat.numel(), (2,), generator=gen).tolist()
            for k, j in enumerate(picks):
                old = flat[j].item()
                flat[j] = old + eps
                lp = forward(P64, idx, targets)[1].item()
                flat[j] = old - eps
                lm = forward(P64, idx, targets)[1].item()
                flat[j] = old
                fd = (lp - lm) / (2 * eps)
                rows.append((name, j, g[j].item(), fd, abs(fd - g[j].item()), k < 2))
    return rows


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)

    params32 = init_params(gen)
    idx = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    targets[0, 0:3] = IGNORE
    targets[2, 5] = IGNORE
    names = list(params32.keys())

    # ---------------- float64 forward + backward reference ----------------
    P64 = {n: t.to(torch.float64).clone().requires_grad_(True) for n, t in params32.items()}
    logits64, loss64 = forward(P64, idx, targets)
    loss64.backward()
    grads64 = {n: P64[n].grad.detach().clone() for n in names}
    for t in P64.values():
        t.requires_grad_(False)
        t.grad = None

    lsm = torch.log_softmax(logits64.detach(), dim=-1).view(-1, V)
    tflat = targets.view(-1)
    keep = tflat != IGNORE
    manual = -lsm[keep].gather(1, tflat[keep].unsqueeze(1)).mean()
    assert abs(manual.item() - loss64.item()) < 1e-12

    # the causal mask holds: logits at position t do not change when later tokens do
    idx2 = idx.clone()
    idx2[:, T // 2:] = (idx2[:, T // 2:] + 1) % V
    with torch.no_grad():
        logits_b, _ = forward(P64, idx2, targets)
    assert torch.equal(logits_b[:, : T // 2], logits64.detach()[:, : T // 2])

    rows = finite_difference_check(P64, grads64, idx, targets, torch.Generator().manual_seed(SEED + 1))
    top_rel = max(r[4] / max(abs(r[2]), abs(r[3])) for r in rows if r[5])
    max_abs = max(r[4] for r in rows)

    # ---------------- float32 training trajectory ----------------
    P32 = {n: t.clone().requires_grad_(True) for n, t in params32.items()}
    decay = [P32[n] for n in names if P32[n].dim() == 2]
    no_decay = [P32[n] for n in names if P32[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS, foreach=False)
    losses, gnorms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(P32, idx, targets)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(list(P32.values()), CLIP)
        opt.step()
        losses.append(loss.item())
        gnorms.append(gn.item())

    # ---------------- write ----------------
    f32 = lambda t: t.detach().to(torch.float32).numpy()
    tensors = [
        ("config", np.array([L, NH, NKV, C, I, V, MAXT, B, T], dtype=np.int64)),
        ("config_f", np.array([RMS_EPS, ROPE_THETA], dtype=np.float64)),
        ("idx", idx.numpy()),
        ("targets", targets.numpy()),
    ]
    tensors += [(f"param/{n}", f32(params32[n])) for n in names]
    tensors += [("logits", f32(logits64)), ("loss", np.array(loss64.item(), dtype=np.float64))]
    tensors += [(f"grad/{n}", f32(grads64[n])) for n in names]
    tensors += [("train/losses", np.array(losses, dtype=np.float32)),
                ("train/grad_norms", np.array(gnorms, dtype=np.float32))]
    tensors += [(f"final/{n}", f32(P32[n])) for n in names]

    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    write_tns(OUT_PATH, tensors)

    back = read_tns(OUT_PATH)
    assert [n for n, _ in back] == [n for n, _ in tensors], "names/order differ"
    assert dict(back)["loss"].shape == (), "loss must be a 0-d tensor"
    for (n, a), (_, b) in zip(tensors, back):
        a = np.asarray(a)
        assert a.shape == b.shape, n
        assert a.dtype.newbyteorder("<") == b.dtype, n
        assert a.tobytes() == b.tobytes(), n

    nparams = sum(t.numel() for t in params32.values())
    print(f"parameters: {len(names)} tensors, {nparams} values")
    print(f"float64 loss: {loss64.item():.17g}  (ln V = {math.log(V):.6f})")
    print(f"finite differences (central, eps 1e-6, float64), {len(rows)} entries: "
          f"max rel err over the {sum(r[5] for r in rows)} top-|grad| entries {top_rel:.3e}; "
          f"max abs err over all {max_abs:.3e}")
    print("float32 training losses:   " + " ".join(f"{x:.6f}" for x in losses))
    print("pre-clip grad norms:       " + " ".join(f"{x:.6f}" for x in gnorms))
    print(f"wrote {OUT_PATH}: {len(tensors)} tensors, {os.path.getsize(OUT_PATH)} bytes (round-trip ok)")
    assert top_rel < 1e-5 and max_abs < 1e-8, "finite-difference check failed"


if __name__ == "__main__":
    sys.exit(main())
