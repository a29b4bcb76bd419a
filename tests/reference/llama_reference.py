#!/usr/bin/env python3
"""PyTorch reference for triad's Llama tests.

What it produces
    tests/data/llama_reference.tns  -- one .tns file holding
      config             int64 (9,)   = [n_layer, n_head, n_kv_head, d_model, intermediate,
                                         vocab, max_seq_len, B, T]
      config_f           float64 (2,) = [rms_norm_eps, rope_theta]
    followed by reference_common.py's language-model reference of this model (B 4, T 16,
    V 128): idx, targets, param/<name>, logits, loss, grad/<name>, train/losses,
    train/grad_norms, final/<name>; reference_common.py describes them and the .tns format.

How to rerun
    pip install torch numpy        # only this script needs torch; triad itself never does
    python3 tests/reference/llama_reference.py        (from the repository root)

    The file as committed comes out bit for bit with torch's AVX-512 CPU kernels; with
    ATEN_CPU_CAPABILITY=avx2 the last bits of some values change.
    On the way (reference_common.py) it checks the loss against the mean NLL, that the causal
    mask holds and the float64 gradients against central finite differences, and re-reads
    the file it wrote.

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

Training (float32, CPU, single thread): reference_common.py's, 10 steps on the same batch:
    clip_grad_norm_(1.0), AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8), weight decay 0.1 on
    the 2-D parameters (embed, head, projections), 0 on the norms.
"""

import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from reference_common import IGNORE, draw_params, write_model_reference

L, NH, NKV, C, I, V, MAXT, B, T = 2, 4, 2, 32, 86, 128, 32, 4, 16
HD = C // NH
RMS_EPS, ROPE_THETA = 1e-5, 10000.0

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


INIT = {  # kind -> the initial value from a standard normal z of the parameter's shape
    "embed": lambda z, shape: z,
    "w": lambda z, shape: z / math.sqrt(shape[1]),
    "norm": lambda z, shape: 1.0 + 0.1 * z,
}


def init_params(gen):
    """float32 initial weights, drawn from `gen` in param_specs() order."""
    return draw_params(param_specs(), gen, INIT)


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


def main():
    write_model_reference(OUT_PATH, init_params, forward,
                          [("config", np.array([L, NH, NKV, C, I, V, MAXT, B, T], dtype=np.int64)),
                           ("config_f", np.array([RMS_EPS, ROPE_THETA], dtype=np.float64))], V, B, T)


if __name__ == "__main__":
    sys.exit(main())
