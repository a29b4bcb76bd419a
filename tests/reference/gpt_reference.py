#!/usr/bin/env python3
"""PyTorch reference for triad's GPT-2 tests.

What it produces
    tests/data/gpt_reference.tns  -- one .tns file holding
      config             int64 (7,)  = [n_layer, n_head, d_model, vocab, max_seq_len, B, T]
    followed by reference_common.py's language-model reference of this model (B 4, T 16,
    V 256): idx, targets, param/<name>, logits, loss, grad/<name>, train/losses,
    train/grad_norms, final/<name>; reference_common.py describes them and the .tns format.

How to rerun
    pip install torch numpy        # only this script needs torch; triad itself never does
    python3 tests/reference/gpt_reference.py          (from the repository root)

    The file as committed comes out bit for bit with ATEN_CPU_CAPABILITY=avx2 set; other CPU
    kernels (AVX-512's) change the last bits of a few gradients and of the training trajectory.
    The script also checks the loss against the mean NLL, that the causal mask holds and its
    float64 gradients against central finite differences, and at the end re-reads the file
    it wrote and asserts that it round-trips.

The model (GPT-2, written here with plain torch ops, no HF)
    x = wte[idx] + wpe[0:T]
    per block (pre-LN):  x = x + attn(ln1(x));  x = x + mlp(ln2(x))
    logits = ln_f(x) @ wte.weight^T            (output head tied to wte, no bias)
    LayerNorm eps 1e-5 (biased variance); Linear weights are (out, in): y = x @ W^T + b
    attn: qkv = Linear(C->3C); q, k, v = split of last dim in that order; heads via
          (B,T,NH,hs)->(B,NH,T,hs); softmax(q k^T / sqrt(hs) with causal mask) @ v;
          back to (B,T,C); proj Linear(C->C)
    mlp:  fc Linear(C->4C), GELU (tanh approximation), proj Linear(4C->C)
    dropout 0.

Initialisation (torch.manual_seed(1234), one CPU generator, drawn in parameter order)
    2-D weights ~ N(0, 0.02), except attn.proj.weight and mlp.proj.weight ~ N(0, 0.02/sqrt(2L));
    Linear biases ~ N(0, 0.02); LayerNorm weight = 1 + 0.1*N(0,1); LayerNorm bias = 0.1*N(0,1).
    All drawn in float32. Then idx ~ U[0,V), targets ~ U[0,V) (independent random ints,
    same generator, drawn after the weights), and targets[0, 0:3] = targets[2, 5] = -100.

Training (float32, CPU, single thread): reference_common.py's, 10 steps on the same batch:
    clip_grad_norm_(1.0), AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8), weight decay 0.1 on
    the 2-D parameters (wte, wpe, Linear weights), 0 on the 1-D ones (biases, LayerNorm).
"""

import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from reference_common import IGNORE, draw_params, write_model_reference

L, NH, C, V, MAXT, B, T = 2, 4, 64, 256, 32, 4, 16
LN_EPS = 1e-5

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "data", "gpt_reference.tns")


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------
def param_specs():
    """(name, shape, kind) in the canonical order. kind picks the initialiser."""
    specs = [("wte.weight", (V, C), "w"), ("wpe.weight", (MAXT, C), "w")]
    for i in range(L):
        p = f"blocks.{i}."
        specs += [
            (p + "ln1.weight", (C,), "ln_w"),
            (p + "ln1.bias", (C,), "ln_b"),
            (p + "attn.qkv.weight", (3 * C, C), "w"),
            (p + "attn.qkv.bias", (3 * C,), "b"),
            (p + "attn.proj.weight", (C, C), "w_proj"),
            (p + "attn.proj.bias", (C,), "b"),
            (p + "ln2.weight", (C,), "ln_w"),
            (p + "ln2.bias", (C,), "ln_b"),
            (p + "mlp.fc.weight", (4 * C, C), "w"),
            (p + "mlp.fc.bias", (4 * C,), "b"),
            (p + "mlp.proj.weight", (C, 4 * C), "w_proj"),
            (p + "mlp.proj.bias", (C,), "b"),
        ]
    specs += [("ln_f.weight", (C,), "ln_w"), ("ln_f.bias", (C,), "ln_b")]
    return specs


INIT = {  # kind -> the initial value from a standard normal z of the parameter's shape
    "w": lambda z, shape: z * 0.02,
    "w_proj": lambda z, shape: z * (0.02 / math.sqrt(2 * L)),
    "b": lambda z, shape: z * 0.02,
    "ln_w": lambda z, shape: 1.0 + 0.1 * z,
    "ln_b": lambda z, shape: 0.1 * z,
}


def init_params(gen):
    """float32 initial weights, drawn from `gen` in param_specs() order."""
    return draw_params(param_specs(), gen, INIT)


# --------------------------------------------------------------------------------------------
# Model: plain functional forward over a dict of parameter tensors
# --------------------------------------------------------------------------------------------
def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=LN_EPS)  # biased variance


def linear(x, w, b=None):
    return F.linear(x, w, b)  # x @ w^T + b, w is (out, in)


def attention(h, P, p):
    Bn, Tn, Cn = h.shape
    hs = Cn // NH
    qkv = linear(h, P[p + "attn.qkv.weight"], P[p + "attn.qkv.bias"])  # (B, T, 3C)
    q, k, v = qkv.split(Cn, dim=-1)
    q = q.view(Bn, Tn, NH, hs).transpose(1, 2)  # (B, NH, T, hs)
    k = k.view(Bn, Tn, NH, hs).transpose(1, 2)
    v = v.view(Bn, Tn, NH, hs).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, NH, T, T)
    mask = torch.ones(Tn, Tn, dtype=torch.bool).triu(diagonal=1)  # key > query
    scores = scores.masked_fill(mask, float("-inf"))
    att = torch.softmax(scores, dim=-1)
    y = att @ v  # (B, NH, T, hs)
    y = y.transpose(1, 2).contiguous().view(Bn, Tn, Cn)
    return linear(y, P[p + "attn.proj.weight"], P[p + "attn.proj.bias"])


def mlp(h, P, p):
    h = linear(h, P[p + "mlp.fc.weight"], P[p + "mlp.fc.bias"])
    h = F.gelu(h, approximate="tanh")
    return linear(h, P[p + "mlp.proj.weight"], P[p + "mlp.proj.bias"])


def forward(P, idx, targets):
    """Returns (logits (B,T,V), loss ())."""
    Tn = idx.shape[1]
    x = P["wte.weight"][idx] + P["wpe.weight"][:Tn]
    for i in range(L):
        p = f"blocks.{i}."
        x = x + attention(layer_norm(x, P[p + "ln1.weight"], P[p + "ln1.bias"]), P, p)
        x = x + mlp(layer_norm(x, P[p + "ln2.weight"], P[p + "ln2.bias"]), P, p)
    x = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = linear(x, P["wte.weight"])  # tied head, no bias
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1),
                           ignore_index=IGNORE, reduction="mean")
    return logits, loss


def main():
    write_model_reference(OUT_PATH, init_params, forward,
                          [("config", np.array([L, NH, C, V, MAXT, B, T], dtype=np.int64))], V, B, T)


if __name__ == "__main__":
    sys.exit(main())
