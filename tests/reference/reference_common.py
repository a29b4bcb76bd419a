"""Shared parts of triad's PyTorch reference scripts (tests/reference/*_reference.py).

The .tns file format (write_tns, read_tns; little-endian)
    b"TRIADTNS" | uint32 version=1 | uint32 count
    count times: uint32 name_len | name (UTF-8, no terminator) | uint32 dtype | uint32 ndim |
                 int64 dims[ndim] | raw C-contiguous data (numel * element size bytes)
    dtype codes: 0 float32, 1 float64, 4 int64, 5 int32.

The language-model reference (write_model_reference), for any model given as
init_params(gen) -> dict of float32 tensors and forward(P, idx, targets) -> (logits, loss)
    Setup: torch.manual_seed(1234) and one CPU generator seeded 1234, from which
    init_params draws the weights; then idx ~ U[0,V), targets ~ U[0,V) (B, T) from the same
    generator, and targets[0, 0:3] = targets[2, 5] = -100 (ignored positions).
    float64: forward and backward from the float32 weights; checks that the loss is the mean
    NLL over the non-ignored positions, that the logits of the first T/2 positions do not
    change when the later tokens do (causal mask), and the gradients against central finite
    differences (eps 1e-6) on every parameter's two largest-|grad| entries and two random
    ones (generator seeded 1235).
    float32 training (CPU, single thread): 10 steps on the same batch. Each step: forward,
    loss, backward, total = clip_grad_norm_(params, 1.0) (the returned pre-clip norm is
    recorded), AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8) with two groups: weight_decay 0.1
    for the 2-D parameters, 0.0 for the others. torch's AdamW is decoupled:
    p <- p * (1 - lr*wd), then the bias-corrected Adam update p <- p - lr * m_hat / (sqrt(v_hat) + eps).
    The file holds, after the model's own config tensors:
      idx, targets       int64 (B, T)
      param/<name>       float32      initial weights (the exact values everything uses)
      logits             float32 (B, T, V)  float64 forward, rounded to float32 for storage
      loss               float64 ()   float64 forward (mean cross-entropy, ignore_index=-100)
      grad/<name>        float32      d loss / d param, computed in float64, stored as float32
      train/losses       float32 (10,) loss before each of the 10 AdamW steps
      train/grad_norms   float32 (10,) global grad L2 norm before clipping, each step
      final/<name>       float32      every parameter after the 10 steps
    The file is re-read after writing and must round-trip exactly.
"""

import math
import os
import struct

import numpy as np
import torch

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
    """Returns a list of (name, np.ndarray) in file order; the arrays are read-only views."""
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


def write_and_check_tns(path, tensors):
    """write_tns, then re-reads the file and asserts it holds exactly `tensors`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_tns(path, tensors)
    back = read_tns(path)
    assert [n for n, _ in back] == [n for n, _ in tensors], "names/order differ"
    for (n, a), (_, b) in zip(tensors, back):
        a = np.asarray(a)
        assert a.shape == b.shape, n
        assert a.dtype.newbyteorder("<") == b.dtype, n
        assert a.tobytes() == b.tobytes(), n


# --------------------------------------------------------------------------------------------
# The language-model reference
# --------------------------------------------------------------------------------------------
SEED = 1234
STEPS = 10
LR, BETAS, ADAM_EPS, WD = 1e-3, (0.9, 0.95), 1e-8, 0.1
CLIP = 1.0
IGNORE = -100


def draw_params(specs, gen, init):
    """float32 weights for `specs`, rows of (name, shape, kind), in that order: for each, a
    standard normal z of its shape drawn from `gen`, then init[kind](z, shape)."""
    return {name: init[kind](torch.randn(shape, generator=gen, dtype=torch.float32), shape).contiguous()
            for name, shape, kind in specs}


def finite_difference_check(forward, P64, grads, idx, targets, gen, eps=1e-6):
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


def adamw_trajectory(forward, params32, idx, targets):
    """The float32 training steps from params32 (left unchanged): returns the trained
    parameters, the loss before each step and the pre-clip gradient norm of each step."""
    P32 = {n: t.clone().requires_grad_(True) for n, t in params32.items()}
    decay = [p for p in P32.values() if p.dim() == 2]
    no_decay = [p for p in P32.values() if p.dim() < 2]
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
    return P32, losses, gnorms


def write_model_reference(out_path, init_params, forward, config, vocab, batch, seq):
    """Computes the language-model reference of the module docstring and writes it to
    out_path. config: the model's own (name, np.ndarray) tensors, written first; vocab,
    batch, seq: V, B, T."""
    torch.set_num_threads(1)  # reproducible float32 reductions
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)

    params32 = init_params(gen)
    idx = torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)
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
    logits64 = logits64.detach()

    # the loss is the hand-written mean NLL over the non-ignored positions
    lsm = torch.log_softmax(logits64, dim=-1).view(-1, vocab)
    tflat = targets.view(-1)
    keep = tflat != IGNORE
    manual = -lsm[keep].gather(1, tflat[keep].unsqueeze(1)).mean()
    assert abs(manual.item() - loss64.item()) < 1e-12

    # the causal mask holds: logits at position t do not change when later tokens do
    idx2 = idx.clone()
    idx2[:, seq // 2:] = (idx2[:, seq // 2:] + 1) % vocab
    with torch.no_grad():
        logits_b, _ = forward(P64, idx2, targets)
    assert torch.equal(logits_b[:, : seq // 2], logits64[:, : seq // 2])

    rows = finite_difference_check(forward, P64, grads64, idx, targets,
                                   torch.Generator().manual_seed(SEED + 1))
    top_rel = max(r[4] / max(abs(r[2]), abs(r[3])) for r in rows if r[5])
    max_abs = max(r[4] for r in rows)

    # ---------------- float32 training trajectory ----------------
    P32, losses, gnorms = adamw_trajectory(forward, params32, idx, targets)

    # ---------------- write ----------------
    f32 = lambda t: t.detach().to(torch.float32).numpy()
    tensors = list(config) + [("idx", idx.numpy()), ("targets", targets.numpy())]
    tensors += [(f"param/{n}", f32(params32[n])) for n in names]
    tensors += [("logits", f32(logits64)),
                ("loss", np.array(loss64.item(), dtype=np.float64))]
    tensors += [(f"grad/{n}", f32(grads64[n])) for n in names]
    tensors += [("train/losses", np.array(losses, dtype=np.float32)),
                ("train/grad_norms", np.array(gnorms, dtype=np.float32))]
    tensors += [(f"final/{n}", f32(P32[n])) for n in names]
    write_and_check_tns(out_path, tensors)
    assert dict(read_tns(out_path))["loss"].shape == (), "loss must be a 0-d tensor"

    # ---------------- summary ----------------
    nparams = sum(t.numel() for t in params32.values())
    print(f"parameters: {len(names)} tensors, {nparams} values")
    print(f"float64 loss: {loss64.item():.17g}  (ln V = {math.log(vocab):.6f})")
    print(f"finite differences (central, eps 1e-6, float64), {len(rows)} entries: "
          f"max rel err over the {sum(r[5] for r in rows)} top-|grad| entries {top_rel:.3e}; "
          f"max abs err over all {max_abs:.3e}")
    print("float32 training losses:   " + " ".join(f"{x:.6f}" for x in losses))
    print("pre-clip grad norms:       " + " ".join(f"{x:.6f}" for x in gnorms))
    print(f"wrote {out_path}: {len(tensors)} tensors, {os.path.getsize(out_path)} bytes "
          "(round-trip ok)")
    assert top_rel < 1e-5 and max_abs < 1e-8, "finite-difference check failed"
