#!/usr/bin/env python3
"""triad's GPT-2 124M training step beside PyTorch's on the same card in the same run.

    speed_step.py --kit KIT --out OUT [--batches 16,32,64] [--steps N] [--warmup N] [--budget S]

For each batch B x 1024 (bf16): `triad-bench step --device cuda --batch B` (a batch that
runs out of device memory is tried again with --checkpointing, and reported as "did not fit"
if it still does not), then torch_gpt2_step.py (benchmarks/peers/: PyTorch
eager and torch.compile, bf16 autocast, SDPA flash attention, fused AdamW) in one process
over the same batches, with the Python that has PyTorch with CUDA (TORCH_PYTHON, else
python3, python, /usr/bin/python3, /opt/conda/bin/python) and the machine's own library
path (TRIAD_MACHINE_LD_LIBRARY_PATH: the kit's libraries are for triad's programs). Where
no Python has it, the peer's columns read "not run: no torch".

Prints a table per batch: ms/step, tokens/s and MFU (6N + 6LCT per token against the card's
dense bf16 peak) of triad, eager and compile; triad/eager and triad/compile; each target
beside its figure (MFU >= 45% at one of the batches; faster than torch.compile); and, where
OUT/kernels.json exists (the profile_kernels step), the share of each kernel family in
triad's batch-16 step. Writes OUT/speed.md; the last line is one JSON object. Keeps to
--budget seconds (default: GPU_KIT_STEP_LIMIT, else 330): the PyTorch runs that would start
too late are reported as not run (and all of them as timed out if the budget ends inside
PyTorch's process). Fails only when one of triad's runs fails for another reason than
memory; PyTorch's failures are reported in the table's notes.
"""
import argparse
import json
import os
import subprocess
import sys
import time

MFU_TARGET, COMPILE_TARGET = 0.45, 1.0
PYTHONS = ("python3", "python", "/usr/bin/python3", "/opt/conda/bin/python")
# Seconds kept for the last PyTorch run that starts (a torch.compile at batch 64).
LAST_RUN_MARGIN = 90
TRIAD_RUN_LIMIT = 120  # seconds for one triad-bench step run


def last_json(text):
    lines = [l for l in text.splitlines() if l.strip()]
    if lines and lines[-1].startswith("{"):
        try:
            return json.loads(lines[-1])
        except ValueError:
            pass
    return None


def run_triad(kit, batch, steps, warmup, timeout, log):
    base = [os.path.join(kit, "bin", "triad-bench"), "step", "--device", "cuda", "--batch", str(batch),
            "--steps", str(steps), "--warmup", str(warmup)]
    for extra in ([], ["--checkpointing"]):
        cmd = base + extra
        log.write("$ %s\n" % " ".join(cmd))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": "error: timed out after %.0f s" % timeout}
        log.write(p.stdout + p.stderr)
        figures = last_json(p.stdout)
        if p.returncode == 0 and figures:
            return dict(figures, status="ok" + (" (activation checkpointing)" if extra else ""))
        if "out of memory" not in (p.stdout + p.stderr).lower():
            return {"status": "error: exit %d" % p.returncode}
    return {"status": "did not fit (out of device memory, with checkpointing too)"}


def machine_env():
    env = dict(os.environ)
    machine = os.environ.get("TRIAD_MACHINE_LD_LIBRARY_PATH")
    if machine is not None:
        env["LD_LIBRARY_PATH"] = machine
    return env


def find_torch_python(env, log):
    candidates = ([os.environ["TORCH_PYTHON"]] if os.environ.get("TORCH_PYTHON") else []) + list(PYTHONS)
    probe = "import torch; print(torch.__version__, torch.cuda.is_available())"
    for py in candidates:
        try:
            p = subprocess.run([py, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        log.write("%s: %s\n" % (py, (p.stdout.strip() or p.stderr.strip().splitlines()[-1:] or ["?"])))
        if p.returncode == 0 and p.stdout.split()[-1:] == ["True"]:
            return py
    return None


def run_torch(kit, python, env, batches, steps, warmup, time_limit, timeout, log):
    cmd = [python, os.path.join(kit, "torch_gpt2_step.py"), "--device", "cuda", "--mode", "eager,compile",
           "--batch", ",".join(map(str, batches)), "--steps", str(steps), "--warmup", str(warmup),
           "--time-limit", "%.0f" % max(time_limit, 1)]
    log.write("$ %s\n" % " ".join(cmd))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=max(timeout, 1))
    except subprocess.TimeoutExpired as e:
        log.write("%s%s\ntimed out after %.0f s\n" % (e.stdout or "", e.stderr or "", timeout))
        return None, "timed out after %.0f s (the runs it finished are in speed.log)" % timeout
    log.write(p.stdout + p.stderr)
    figures = last_json(p.stdout)
    if not figures:
        return None, "error: exit %d, no figures" % p.returncode
    return figures, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="16,32,64")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--torch-warmup", type=int, default=3, help="untimed PyTorch steps (compile: the first compiles)")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("GPU_KIT_STEP_LIMIT", 330)))
    a = ap.parse_args()
    t0 = time.monotonic()
    batches = [int(b) for b in a.batches.split(",")]
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "speed.log"), "w")

    triad = {}
    for b in batches:
        triad[b] = run_triad(a.kit, b, a.steps, a.warmup, TRIAD_RUN_LIMIT, log)
        print("triad batch %d: %s" % (b, triad[b]["status"]), flush=True)
    card = next((r["device_name"] for r in triad.values() if r.get("device_name")), None)

    env = machine_env()
    python = find_torch_python(env, log)
    torch_runs, torch_note, torch_version = {}, None, None
    if python is None:
        torch_note = "not run: no torch"
    else:
        left = a.budget - (time.monotonic() - t0)
        figures, torch_note = run_torch(a.kit, python, env, batches, a.steps, a.torch_warmup, left - LAST_RUN_MARGIN,
                                        left - 10, log)
        if figures:
            torch_version = figures.get("torch")
            card = card or figures.get("device_name")
            for r in figures["results"]:
                torch_runs[(r["mode"], r["batch"])] = r
    print("PyTorch: %s" % (torch_note or "%s (%s)" % (torch_version, python)), flush=True)

    def peer(mode, b):
        return torch_runs.get((mode, b)) or {"status": torch_note or "not run"}

    def tps(r):
        return r.get("tokens_per_s") if r.get("status", "").startswith("ok") else None

    def ratio(x, y):
        return x / y if x and y else None

    fmt = lambda v, f: f % v if v is not None else "-"
    pct = lambda v: "%.1f%%" % (100 * v) if v is not None else "-"
    verdict = lambda ok: "-" if ok is None else ("PASS" if ok else "MISS")
    judged = lambda text, ok: text if ok is None else "%s %s" % (text, verdict(ok))
    rows, table = [], []
    table.append("# triad's GPT-2 124M step beside PyTorch's on %s (bf16, T 1024)\n" % (card or "?"))
    table.append("| batch | triad ms | triad tok/s | triad MFU (target >= 45%) | eager tok/s | compile tok/s "
                 "| triad/eager | triad/compile (target > 1) | notes |")
    table.append("|---|---|---|---|---|---|---|---|---|")
    for b in batches:
        t, e, c = triad[b], peer("eager", b), peer("compile", b)
        mfu = t.get("mfu") if tps(t) else None
        te, tc = ratio(tps(t), tps(e)), ratio(tps(t), tps(c))
        notes = "; ".join("%s: %s" % (who, r["status"]) for who, r in (("triad", t), ("eager", e), ("compile", c))
                          if r.get("status") != "ok")
        table.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            b, fmt(t.get("step_ms_median") if tps(t) else None, "%.1f"), fmt(tps(t), "%.0f"),
            judged(pct(mfu), None if mfu is None else mfu >= MFU_TARGET), fmt(tps(e), "%.0f"), fmt(tps(c), "%.0f"),
            fmt(te, "%.2f"), judged(fmt(tc, "%.2f"), None if tc is None else tc > COMPILE_TARGET), notes or "-"))
        rows.append({"batch": b, "triad": t, "eager": e, "compile": c, "triad_mfu": mfu, "triad_vs_eager": te,
                     "triad_vs_compile": tc})
    mfus = [r["triad_mfu"] for r in rows if r["triad_mfu"] is not None]
    best = lambda key: max((tps(r[key]) for r in rows if tps(r[key])), default=None)
    best_vs_compile = ratio(best("triad"), best("compile"))
    table.append("")
    table.append("Targets on %s: triad's best MFU %s (target >= 45%% at one batch): %s; triad's best tokens/s over "
                 "torch.compile's best %s (target > 1): %s" % (
                     card or "?", pct(max(mfus) if mfus else None),
                     verdict(None if not mfus else max(mfus) >= MFU_TARGET), fmt(best_vs_compile, "%.2f"),
                     verdict(None if best_vs_compile is None else best_vs_compile > COMPILE_TARGET)))
    table.append("MFU: 6N + 6LCT FLOPs per token (N = 124.5M parameters with the padded vocabulary) against the "
                 "card's dense bf16 peak (%s TFLOP/s)." % fmt(next((r["triad"].get("peak_tflops") for r in rows
                                                                  if r["triad"].get("peak_tflops")), None), "%.0f"))
    kernels = os.path.join(a.out, "kernels.json")
    family_share = None
    if os.path.exists(kernels):
        k = json.load(open(kernels))
        family_share = k.get("family_share")
        table.append("\nKernel families of triad's step (profile_kernels: batch %s, %.1f ms of kernels in a %.1f ms "
                     "step):\n" % (k.get("batch"), k.get("kernel_ms_per_step") or 0, k.get("step_ms_median") or 0))
        table.append("| family | share |\n|---|---|")
        for fam, share in sorted(family_share.items(), key=lambda kv: -kv[1]):
            table.append("| %s | %.1f%% |" % (fam, 100 * share))
    text = "\n".join(table) + "\n"
    open(os.path.join(a.out, "speed.md"), "w").write(text)
    print(text)
    ok = all(r["triad"].get("status", "").startswith(("ok", "did not fit")) for r in rows)
    print(json.dumps({"check": "speed_step", "device_name": card, "torch": torch_version,
                      "triad_mfu_max": max(mfus) if mfus else None, "mfu_target": MFU_TARGET,
                      "triad_vs_compile_best": best_vs_compile, "compile_target": COMPILE_TARGET,
                      "family_share": family_share,
                      "rows": [{"batch": r["batch"], "triad_tokens_per_s": tps(r["triad"]),
                                "triad_step_ms": r["triad"].get("step_ms_median"), "triad_mfu": r["triad_mfu"],
                                "triad_status": r["triad"].get("status"),
                                "eager_tokens_per_s": tps(r["eager"]), "eager_mfu": r["eager"].get("mfu"),
                                "eager_status": r["eager"].get("status"),
                                "compile_tokens_per_s": tps(r["compile"]), "compile_mfu": r["compile"].get("mfu"),
                                "compile_status": r["compile"].get("status"),
                                "triad_vs_eager": r["triad_vs_eager"], "triad_vs_compile": r["triad_vs_compile"]}
                               for r in rows]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
