#!/usr/bin/env python3
"""A model (the demo model, or --config another of the kit's configs) trained for a few steps
three times on the same batches: f32 on the CPU, f32 on the GPU and bf16 on the GPU, each
through triad-train with --metrics. Passes when

  - the GPU's f32 loss equals the CPU's at every step within 1e-3 relative (the same
    arithmetic in another summation order; test_train_cuda holds one step to 1e-4), and
  - the bf16 loss stays within 2% of the f32 loss at every step (test_train_cuda's bound
    for bf16 mixed precision), and
  - the curve falls: the mean of the last 10 f32 losses at least 0.5 below the first.

Prints the curves every 10 steps and, last, one JSON object with the figures.
"""
import argparse
import json
import os
import subprocess
import sys

F32_BOUND, BF16_BOUND, MIN_FALL = 1e-3, 0.02, 0.5


def train(kit, work, name, steps, extra, launcher=(), config="demo.json"):
    metrics = os.path.join(work, name + ".jsonl")
    cmd = list(launcher) + [os.path.join(kit, "bin", "triad-train"), "--config", os.path.join(kit, "configs", config),
           "--set", "data.corpus=" + os.path.join(kit, "data", "tokens.bin"),
           "--set", "data.tokenizer=" + os.path.join(kit, "data", "tokenizer.json"),
           "--set", "output_dir=" + os.path.join(work, name), "--steps", str(steps),
           "--metrics", metrics] + extra
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    losses = [json.loads(line)["loss"] for line in open(metrics) if line.strip()]
    if len(losses) != steps:
        sys.exit("%s: %d losses in %s, expected %d" % (name, len(losses), metrics, steps))
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kit", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--config", default="demo.json", help="a file of the kit's configs/ (default demo.json)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cpu = train(a.kit, a.work, "f32_cpu", a.steps, ["--set", "device=cpu"], config=a.config)
    gpu = train(a.kit, a.work, "f32_cuda", a.steps, ["--set", "device=cuda"], config=a.config)
    bf16 = train(a.kit, a.work, "bf16_cuda", a.steps, ["--set", "device=cuda", "--set", "bf16.enabled=true"],
                 config=a.config)

    rel = lambda x, y: abs(x - y) / abs(y)
    f32_err = max(rel(g, c) for g, c in zip(gpu, cpu))
    bf16_err = max(rel(b, g) for b, g in zip(bf16, gpu))
    fall = gpu[0] - sum(gpu[-10:]) / len(gpu[-10:])
    print("\n step   f32 cpu  f32 cuda  bf16 cuda")
    for s in sorted({0, *range(9, a.steps, 10), a.steps - 1}):
        print("%5d  %8.4f  %8.4f  %9.4f" % (s + 1, cpu[s], gpu[s], bf16[s]))
    print("\nf32 cuda vs cpu: max relative difference %.2e (bound %.0e)" % (f32_err, F32_BOUND))
    print("bf16 vs f32 cuda: max relative difference %.2e (bound %.0e)" % (bf16_err, BF16_BOUND))
    print("f32 curve falls by %.3f (at least %.1f)" % (fall, MIN_FALL))
    ok = f32_err <= F32_BOUND and bf16_err <= BF16_BOUND and fall >= MIN_FALL
    print(json.dumps({"check": "train_curves", "config": a.config, "steps": a.steps, "ok": ok, "f32_cuda_vs_cpu": f32_err,
                      "bf16_vs_f32": bf16_err, "fall": fall, "f32_cpu": cpu, "f32_cuda": gpu, "bf16_cuda": bf16}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
