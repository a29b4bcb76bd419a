#!/usr/bin/env python3
"""Where a training step's GPU time goes: one step of `triad-bench step` under Nsight Compute,
reading only each kernel's duration (gpu__time_duration.sum), summed per kernel name.

    profile_kernels.py OUT_MD [triad-bench step arguments...]

Writes OUT_MD: the kernels grouped by family (gemm, attention, norm, elementwise, convert,
copy, optimizer, loss, other: FAMILIES, by the kernel's name) and a table of kernels by total
time (launches, total ms, mean us, share of the summed kernel time), and prints both; beside
OUT_MD, the same stem with .json holds the figures and the families. The last line printed
is one JSON object with the summed kernel time, each family's share and the step's wall
time measured without the profiler (the bench's median), so the gap between them is time
the GPU sat idle (launch overhead, host synchronization). Exit 77 (skip) when ncu is not
installed.
"""
import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys

# A kernel's family: the first whose pattern its name matches (case-insensitive), else other.
FAMILIES = (
    ("attention", r"attention|flash|fmha|sdpa"),
    ("gemm", r"nvjet|gemm|cutlass|xmma|cublas|splitkreduce|matmul"),
    ("loss", r"cross_entropy|classifier|nll"),
    ("norm", r"layer_norm|layernorm|rms_norm|rmsnorm"),
    ("optimizer", r"adam|sgd|lamb|multi_tensor|optim"),
    ("convert", r"convert|cast"),
    ("copy", r"copy|memcpy|transpose|contiguous|gather|scatter|concat|\bcat_"),
    ("elementwise", r"map1|map2|elementwise|add_row_vector|gelu|silu|rotary|dropout|fill|bias|scale|pointwise|unary|binary"),
)


def family(name):
    for fam, pattern in FAMILIES:
        if re.search(pattern, name, re.IGNORECASE):
            return fam
    return "other"


def families(by_name):
    """{family: (launches, ns)} over by_name's {kernel: (launches, ns)}, every family listed."""
    out = {fam: (0, 0.0) for fam, _ in FAMILIES + (("other", ""),)}
    for name, (n, t) in by_name.items():
        fn, ft = out[family(name)]
        out[family(name)] = (fn + n, ft + t)
    return out


def family_table(fams):
    total = sum(t for _, t in fams.values())
    lines = ["| family | launches | total ms | share |", "|---|---|---|---|"]
    for fam, (n, t) in sorted(fams.items(), key=lambda kv: -kv[1][1]):
        lines.append("| %s | %d | %.3f | %.1f%% |" % (fam, n, t / 1e6, 100 * t / max(total, 1)))
    return lines


def find_ncu():
    found = shutil.which("ncu")
    if found:
        return found
    for path in sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu")):
        return path
    return None


def main():
    out_md, bench_args = sys.argv[1], sys.argv[2:]
    ncu = find_ncu()
    if not ncu:
        print("ncu (Nsight Compute) is not installed here")
        sys.exit(77)
    step = ["triad-bench", "step", "--device", "cuda"] + bench_args
    # The step's own timing, unprofiled.
    plain = subprocess.run(step + ["--warmup", "2", "--steps", "5"], capture_output=True, text=True)
    if plain.returncode != 0:
        sys.stdout.write(plain.stdout + plain.stderr)
        sys.exit(1)
    timing = json.loads(plain.stdout.strip().splitlines()[-1])
    # One step profiled, the first: it launches the same kernels as any other (what the
    # first step does more, allocating and choosing GEMM algorithms, is host time).
    cmd = [ncu, "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw", "--clock-control", "none"]
    prof = subprocess.run(cmd + step + ["--warmup", "0", "--steps", "1"], capture_output=True, text=True)
    if prof.returncode != 0:
        sys.stdout.write(prof.stdout[-4000:] + prof.stderr[-4000:])
        sys.exit(1)
    text = prof.stdout[prof.stdout.find('"ID"'):]
    rows = list(csv.DictReader(io.StringIO(text)))
    by_name = {}
    for r in rows:
        value = r.get("gpu__time_duration.sum", "")
        try:
            ns = float(value.replace(",", ""))
        except ValueError:
            continue  # the units row
        name = r.get("Kernel Name", "?")
        short = name.split("(")[0][:90]
        n, t = by_name.get(short, (0, 0.0))
        by_name[short] = (n + 1, t + ns)
    total = sum(t for _, t in by_name.values())
    lines = ["| kernel | launches | total ms | mean us | share |", "|---|---|---|---|---|"]
    for name, (n, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        lines.append("| %s | %d | %.3f | %.1f | %.1f%% |" % (name, n, t / 1e6, t / n / 1e3, 100 * t / max(total, 1)))
    fams = families(by_name)
    by_family = family_table(fams)
    with open(out_md, "w") as f:
        f.write("# Kernels of one step (%s)\n\n" % " ".join(step))
        f.write("## By family\n\n" + "\n".join(by_family) + "\n\n## By kernel\n\n" + "\n".join(lines) + "\n")
    print("\n".join(by_family) + "\n")
    print("\n".join(lines[:40]))
    figures = {"kernel_ms_per_step": total / 1e6, "launches_per_step": sum(n for n, _ in by_name.values()),
               "step_ms_median": timing.get("step_ms_median"), "fwd_ms_median": timing.get("fwd_ms_median"),
               "bwd_ms_median": timing.get("bwd_ms_median"), "batch": timing.get("batch"),
               "device_name": timing.get("device_name"),
               "family_share": {fam: t / max(total, 1) for fam, (_, t) in fams.items()}}
    with open(os.path.splitext(out_md)[0] + ".json", "w") as f:
        json.dump(dict(figures, families={fam: {"launches": n, "ms": t / 1e6} for fam, (n, t) in fams.items()}), f,
                  indent=1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
