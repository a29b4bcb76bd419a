#!/usr/bin/env python3
"""Where a training step's GPU time goes: one step of `triad-bench step` under Nsight Compute,
reading only each kernel's duration (gpu__time_duration.sum), summed per kernel name.

    profile_kernels.py OUT_MD [triad-bench step arguments...]

Writes OUT_MD: a table of kernels by total time (launches, total ms, mean us, share of the
summed kernel time), and prints it; the last line printed is one JSON object with the summed
kernel time and the step's wall time measured without the profiler (the bench's median), so
the gap between them is time the GPU sat idle (launch overhead, host synchronization).
Exit 77 (skip) when ncu is not installed.
"""
import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys


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
    with open(out_md, "w") as f:
        f.write("# Kernels of one step (%s)\n\n" % " ".join(step))
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:40]))
    print(json.dumps({"kernel_ms_per_step": total / 1e6, "launches_per_step": sum(n for n, _ in by_name.values()),
                      "step_ms_median": timing.get("step_ms_median"), "fwd_ms_median": timing.get("fwd_ms_median"),
                      "bwd_ms_median": timing.get("bwd_ms_median")}))


if __name__ == "__main__":
    main()
