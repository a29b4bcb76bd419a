#!/usr/bin/env python3
"""PyTorch reference for triad's GPT-2 tests.

What it produces
    tests/data/gpt_reference.tns  -- one .tns file (format below) holding:
      config             int64 (7,)  = [n_layer, n_head, d_model, vocab, max_seq_len, B, T]
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
    python3 tests/reference/gpt_reference.py          (from the repository root)

    The script also checks its own gradients against central finite differences in float64,
    and at the end re-reads the file it wrote and asserts that it round-trips.

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

Training (float32, CPU, single thread)
    10 steps on the same batch. Each step: forward, loss, backward,
    total = clip_grad_norm_(params, 1.0)  (the returned pre-clip norm is recorded),
    AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8) with two groups: weight_decay 0.1 for the
    2-D parameters (wte, wpe, Linear weights), 0.0 for 1-D ones (biases, LayerNorm).
    torch's AdamW is decoupled: p <- p * (1 - lr*wd), then the bias-corrected Adam update
    p <- p - lr * m_hat / (sqrt(v_hat) + eps).

.tns file format (little-endian)
    b"TRIADTNS" | uint32 version=1 | uint32 count
    count times: uint32 name_len | name (UTF-8, no terminator) | uint32 dtype | uint32 ndim |
                 int64 dims[ndim] | raw C-contiguous data (numel * element size bytes)
    dtype codes: 0 float32, 1 float64, 4 int64, 5 int32.
"""

import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------
L, NH, C, V, MAXT, B, T = 2, 4, 64, 256, 32, 4, 16
SEED = 1234
STEPS = 10
LR, BETAS, ADAM_EPS, WD = 1e-3, (0.9, 0.95), 1e-8, 0.1
CLIP = 1.0
LN_EPS = 1e-5
IGNORE = -100

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_PATH = os.path.join(REPO_ROOT, "tests", "data", "gpt_reference.tns")

# --------------------------------------------------------------------------------------------
# .tns writer / reader
# --------------------------------------------------------------------------------------------
MAGIC = b"TRIADTNS"
VERSION = 1
DTYPE_CODES = {np.dtype("<f4"): 0, np.dtype("<f8"): 1, np.dtype("<i8"): 4, np.dtype("<i4"): 5}
CODE_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}


def write_tns(path, tensors):
    """tensors: list of (name, np.ndarray). Writes them in that order."""
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<II", VERSION, len(tensors)))
        for name, arr in tensors:
            # (not np.ascontiguousarray: it turns 0-d arrays, e.g. the scalar loss, into 1-d)
            arr = np.asarray(arr)
            if not arr.flags.c_contiguous:
                arr = arr.copy(order="C")
            dt = arr.dtype.newbyteorder("<")
            if dt not in DTYPE_CODES:
                raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
            arr = arr.astype(dt, copy=False)
            nb = name.encode("utf-8")
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<II", DTYPE_CODES[dt], arr.ndim))
            f.write(struct.pack(f"<{arr.ndim}q", *arr.shape))
            f.write(arr.tobytes(order="C"))


def read_tns(path):
    """Returns a list of (name, np.ndarray) in file order."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(n):
        nonlocal pos
        if pos + n > len(buf):
            raise ValueError("truncated .tns file")
        out = buf[pos:pos + n]
        pos += n
        return out

    if take(8) != MAGIC:
        raise ValueError("bad magic")
    version, count = struct.unpack("<II", take(8))
    if version != VERSION:
        raise ValueError(f"unsupported version {version}")
    out = []
    for _ in range(count):
        (name_len,) = struct.unpack("<I", take(4))
        name = take(name_len).decode("utf-8")
        code, ndim = struct.unpack("<II", take(8))
        dims = struct.unpack(f"<{ndim}q", take(8 * ndim))
        dt = CODE_DTYPES[code]
        numel = int(np.prod(dims, dtype=np.int64))  # 1 for ndim == 0
        data = np.frombuffer(take(numel * dt.itemsize), dtype=dt).reshape(dims)
        out.append((name, data))
    if pos != len(buf):
        raise ValueError("trailing bytes in .tns file")
    return out


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


def init_params(gen):
    """float32 initial weights, drawn from `gen` in param_specs() order."""
    params = {}
    for name, shape, kind in param_specs():
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind == "w":
            t = z * 0.02
        elif kind == "w_proj":
            t = z * (0.02 / math.sqrt(2 * L))
        elif kind == "b":
            t = z * 0.02
        elif kind == "ln_w":
            t = 1.0 + 0.1 * z
        elif kind == "ln_b":
            t = 0.1 * z
        else:
            raise AssertionError(kind)
        params[name] = t.to(torch.float32).contiguous()
    return params


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


# --------------------------------------------------------------------------------------------
# Finite-difference check of the float64 gradients
# --------------------------------------------------------------------------------------------
def finite_difference_check(P64, grads, idx, targets, gen, eps=1e-6):
    """Central differences on a few entries of every parameter: for each parameter, its two
    entries with the largest |grad| plus two random ones.
    Returns rows of (name, flat index, analytic, finite difference, |difference|, is_top).
    The finite difference itself carries ~1e-10 absolute round-off (|loss| * 1e-16 / eps), so
    relative error is only meaningful for the top-|grad| entries; random entries may have
    gradients ~1e-7 and are judged by absolute error instead."""
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
                an = g[j].item()
                rows.append((name, j, an, fd, abs(fd - an), k < 2))
    return rows


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
def main():
    torch.set_num_threads(1)  # reproducible float32 reductions
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

    # sanity: loss equals the hand-written mean NLL over the non-ignored positions
    lsm = torch.log_softmax(logits64.detach(), dim=-1).view(-1, V)
    tflat = targets.view(-1)
    keep = tflat != IGNORE
    manual = -lsm[keep].gather(1, tflat[keep].unsqueeze(1)).mean()
    assert abs(manual.item() - loss64.item()) < 1e-12

    rows = finite_difference_check(P64, grads64, idx, targets,
                                   torch.Generator().manual_seed(SEED + 1))
    top_rel = max(r[4] / max(abs(r[2]), abs(r[3])) for r in rows if r[5])
    max_abs = max(r[4] for r in rows)

    # ---------------- float32 training trajectory ----------------
    P32 = {n: t.clone().requires_grad_(True) for n, t in params32.items()}
    decay = [P32[n] for n in names if P32[n].dim() == 2]
    no_decay = [P32[n] for n in names if P32[n].dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
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
        ("config", np.array([L, NH, C, V, MAXT, B, T], dtype=np.int64)),
        ("idx", idx.numpy()),
        ("targets", targets.numpy()),
    ]
    tensors += [(f"param/{n}", f32(params32[n])) for n in names]
    tensors += [("logits", f32(logits64)),
                ("loss", np.array(loss64.item(), dtype=np.float64))]
    tensors += [(f"grad/{n}", f32(grads64[n])) for n in names]
    tensors += [("train/losses", np.array(losses, dtype=np.float32)),
                ("train/grad_norms", np.array(gnorms, dtype=np.float32))]
    tensors += [(f"final/{n}", f32(P32[n])) for n in names]

    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    write_tns(OUT_PATH, tensors)

    # ---------------- round-trip check ----------------
    back = read_tns(OUT_PATH)
    assert [n for n, _ in back] == [n for n, _ in tensors], "names/order differ"
    assert dict(back)["loss"].shape == (), "loss must be a 0-d tensor"
    for (n, a), (_, b) in zip(tensors, back):
        a = np.asarray(a)
        assert a.shape == b.shape, n
        assert a.dtype.newbyteorder("<") == b.dtype, n
        assert a.tobytes() == b.tobytes(), n

    # ---------------- summary ----------------
    nparams = sum(t.numel() for t in params32.values())
    print(f"parameters: {len(names)} tensors, {nparams} values")
    print(f"float64 loss: {loss64.item():.17g}  (ln V = {math.log(V):.6f})")
    print(f"finite differences (central, eps 1e-6, float64), {len(rows)} entries: "
          f"max rel err over the {sum(r[5] for r in rows)} top-|grad| entries {top_rel:.3e}; "
          f"max abs err over all {max_abs:.3e}")
    print("float32 training losses:   " + " ".join(f"{x:.6f}" for x in losses))
    print("pre-clip grad norms:       " + " ".join(f"{x:.6f}" for x in gnorms))
    print(f"wrote {OUT_PATH}: {len(tensors)} tensors, {os.path.getsize(OUT_PATH)} bytes "
          "(round-trip ok)")
    assert top_rel < 1e-5 and max_abs < 1e-8, "finite-difference check failed"


if __name__ == "__main__":
    sys.exit(main())
