#!/usr/bin/env python3
"""PyTorch's GPT-2 training step, the peer of `triad-bench step`: the same model (GPT-2 124M on
a GPU: L12 C768 NH12 T1024, vocabulary 50257 padded to 50304 as triad's gpt2-124m preset; the
tiny preset L2 C64 NH4 V256 T64 on the cpu), the same fixed batch of random tokens, AdamW
(lr 3e-4, betas 0.9/0.95, weight decay 0.1, no clipping: triad-bench step's), timed the
same way: median wall ms per step (the device finished) over --steps after --warmup.

The PyTorch side is what a PyTorch user writes for speed: bf16 autocast over f32 weights,
F.scaled_dot_product_attention restricted to the flash kernel (--sdpa default lets PyTorch
pick, cuDNN's included), tanh GELU, the head tied to the token table, fused AdamW on a GPU,
TF32 matmuls allowed; --mode eager, compile (torch.compile(dynamic=False), one compilation
per batch size) or both. The padded vocabulary rows never reach the loss (the logits are
cut to 50257 columns before the cross-entropy), as in triad.

MFU uses triad's formula: 6 N + 6 L C T FLOPs per token, N the parameters with the padded
rows (triad's sum of parameter_sizes()), against the card's dense bf16 peak (triad's table:
H100/H200 SXM 989 TFLOP/s, H100 NVL 835, H100 PCIe 756, A100 312; else --peak-tflops, or 989
with a note).

    torch_gpt2_step.py [--device cuda|cpu] [--mode eager,compile] [--batch 16,32,64]
                       [--seq T] [--steps N] [--warmup N] [--time-limit S] [--sdpa flash|default]

A (mode, batch) that runs out of device memory is reported as "did not fit", one that would
start after --time-limit seconds as "not run", and the others still run. Prints a table;
the last line is one JSON object. Exit 77 (a skip) where PyTorch is not installed.
"""
import argparse
import gc
import json
import math
import statistics
import sys
import time

PRESETS = {  # triad's GPTConfig::preset
    "tiny": dict(n_layer=2, n_head=4, d_model=64, seq_len=64, vocab_size=256, vocab_multiple=1),
    "gpt2-124m": dict(n_layer=12, n_head=12, d_model=768, seq_len=1024, vocab_size=50257, vocab_multiple=64),
}
PEAKS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0))
DEFAULT_PEAK = 989.0


def padded_vocab(cfg):
    m = cfg["vocab_multiple"]
    return (cfg["vocab_size"] + m - 1) // m * m


def parameters(cfg):
    """triad's N: every parameter with the padded vocabulary rows."""
    C, L = cfg["d_model"], cfg["n_layer"]
    return padded_vocab(cfg) * C + cfg["seq_len"] * C + L * (12 * C * C + 13 * C) + 2 * C


def flops_per_token(cfg, seq):
    return 6.0 * parameters(cfg) + 6.0 * cfg["n_layer"] * cfg["d_model"] * seq


def peak_tflops(name):
    for part, tflops in PEAKS:
        if part in name:
            return tflops
    return 0.0


def build_model(torch, cfg):
    nn, F = torch.nn, torch.nn.functional
    C, NH, V = cfg["d_model"], cfg["n_head"], cfg["vocab_size"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(padded_vocab(cfg), C)
            self.wpe = nn.Embedding(cfg["seq_len"], C)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["n_layer"]))
            self.ln_f = nn.LayerNorm(C)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            T = idx.size(1)
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)[..., :V]  # the tied head, padding cut
            return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))

    return GPT()


def time_one(torch, args, cfg, mode, batch, dev):
    """Median ms/step and the device's peak memory of one (mode, batch) run."""
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    with dev:
        model = build_model(torch, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    run = torch.compile(model, dynamic=False) if mode == "compile" else model
    g = torch.Generator(device="cpu").manual_seed(7)
    tokens = torch.randint(0, cfg["vocab_size"], (batch, args.seq + 1), generator=g).to(dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = run(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    times, loss = [], None
    for s in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        if s >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None
    return statistics.median(times), float(loss.detach()), peak


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (cuda:N) or cpu")
    p.add_argument("--model", choices=sorted(PRESETS), help="default: gpt2-124m on a GPU, tiny on the cpu")
    p.add_argument("--mode", default="eager,compile", help="eager, compile, or both comma-separated")
    p.add_argument("--batch", help="sequences per step, comma-separated (default: 16 on a GPU, 4 on the cpu)")
    p.add_argument("--seq", type=int, help="tokens per sequence (default: the model's seq_len)")
    p.add_argument("--steps", type=int, default=10, help="timed steps (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compile: the first compiles)")
    p.add_argument("--time-limit", type=float, default=0, help="start no run after this many seconds (0: none)")
    p.add_argument("--peak-tflops", type=float, default=0, help="the device's dense bf16 peak for MFU")
    p.add_argument("--sdpa", choices=("flash", "default"), default="flash",
                   help="flash: only the flash-attention kernel (on a GPU); default: PyTorch chooses")
    args = p.parse_args()
    modes = args.mode.split(",")
    if any(m not in ("eager", "compile") for m in modes) or args.steps < 1 or args.warmup < 0:
        p.error("--mode takes eager and/or compile; --steps >= 1, --warmup >= 0")
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed for %s" % sys.executable)
        sys.exit(77)
    t_start = time.monotonic()
    dev = torch.device(args.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    cuda = dev.type == "cuda"
    cfg = PRESETS[args.model or ("gpt2-124m" if cuda else "tiny")]
    args.seq = args.seq or cfg["seq_len"]
    if not 1 <= args.seq <= cfg["seq_len"]:
        p.error("--seq must be in [1, %d]" % cfg["seq_len"])
    batches = [int(b) for b in (args.batch or ("16" if cuda else "4")).split(",")]
    if any(b < 1 for b in batches):
        p.error("--batch values must be >= 1")

    device_name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    peak = args.peak_tflops or (peak_tflops(device_name) if cuda else 0.0)
    if cuda and not peak:
        peak = DEFAULT_PEAK
        print("note: no known bf16 peak for %s; MFU is against %.0f TFLOP/s, set --peak-tflops" % (device_name, peak))
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    fpt = flops_per_token(cfg, args.seq)
    n = parameters(cfg)
    print("torch %s GPT-2 step: %.1fM parameters, seq %d, bf16 autocast, sdpa %s, on %s (%s)"
          % (torch.__version__, n / 1e6, args.seq, args.sdpa, dev, device_name))
    print("%-8s %6s %10s %12s %7s %10s  %s" % ("mode", "batch", "step_ms", "tokens/s", "MFU", "peak_MiB", "status"))

    sdpa = None
    if cuda and args.sdpa == "flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    results = []
    for batch in batches:
        for mode in modes:
            r = {"mode": mode, "batch": batch, "seq": args.seq, "status": "ok", "step_ms_median": None,
                 "tokens_per_s": None, "mfu": None, "device_peak_allocated_mib": None}
            if args.time_limit and time.monotonic() - t_start > args.time_limit:
                r["status"] = "not run: past the %g s time limit" % args.time_limit
            else:
                try:
                    if sdpa:
                        with sdpa():
                            ms, loss, mib = time_one(torch, args, cfg, mode, batch, dev)
                    else:
                        ms, loss, mib = time_one(torch, args, cfg, mode, batch, dev)
                    if not math.isfinite(loss):
                        raise RuntimeError("the loss is %s" % loss)
                    tps = batch * args.seq / (ms / 1e3)
                    r.update(step_ms_median=ms, tokens_per_s=tps, loss=loss, device_peak_allocated_mib=mib,
                             mfu=fpt * tps / (peak * 1e12) if peak else None)
                except Exception as e:  # out of memory: did not fit; the next run goes on
                    oom = isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()
                    r["status"] = "did not fit (out of device memory)" if oom else "error: %s" % str(e)[:300]
                if mode == "compile":
                    torch._dynamo.reset()
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
            results.append(r)
            fmt = lambda k, f: (f % r[k]) if r[k] is not None else "-"
            print("%-8s %6d %10s %12s %7s %10s  %s" % (mode, batch, fmt("step_ms_median", "%.1f"),
                                                     fmt("tokens_per_s", "%.0f"),
                                                     "%.1f%%" % (100 * r["mfu"]) if r["mfu"] is not None else "-",
                                                     fmt("device_peak_allocated_mib", "%.0f"), r["status"]))
    print(json.dumps({"bench": "torch_gpt2_step", "torch": torch.__version__, "device": str(dev),
                      "device_name": device_name, "model": args.model or ("gpt2-124m" if cuda else "tiny"),
                      "params": n, "seq": args.seq, "flops_per_token": fpt, "peak_tflops": peak or None,
                      "sdpa": args.sdpa, "steps": args.steps, "warmup": args.warmup, "results": results}))
    return 0 if all(r["status"] == "ok" or r["status"].startswith(("did not fit", "not run")) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
