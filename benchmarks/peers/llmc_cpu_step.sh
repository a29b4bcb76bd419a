#!/usr/bin/env bash
# llm.c's CPU trainer (train_gpt2.c) on the shape of `triad-bench step --model gpt2-124m
# --batch 4 --seq 64`, timed in the same run as triad, for the ratio the README reports.
#
#   benchmarks/peers/llmc_cpu_step.sh LLMC_CHECKOUT [STEPS]
#
# LLMC_CHECKOUT is a checkout of github.com/karpathy/llm.c (not part of triad). Its trainer
# needs a GPT-2 checkpoint and token files; timing does not depend on the values, so this
# script writes a zero-weight checkpoint in llm.c's format (header of 256 int32: magic
# 20240326, version 3, maxT, V, L, NH, C, padded V; then the fp32 tensors) and random
# tokens. Prints llm.c's per-step times, triad's, and as its last line one JSON object.
set -euo pipefail
llmc=$(cd "$1" && pwd)
steps=${2:-6}
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gcc -Ofast -march=native -fopenmp -Wno-unused-result -I"$llmc" "$llmc/train_gpt2.c" -lm -o "$work/train_gpt2"
python3 - "$work" <<'PY'
import os, random, struct, sys
work = sys.argv[1]
L, C, NH, V, Vp, maxT = 12, 768, 12, 50257, 50304, 1024
params = Vp*C + maxT*C + L*(2*C + 3*C*C + 3*C + C*C + C + 2*C + 4*C*C + 4*C + 4*C*C + C) + 2*C
header = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
with open(os.path.join(work, "gpt2_124M.bin"), "wb") as f:
    f.write(struct.pack("256i", *header))
    f.truncate(256 * 4 + params * 4)  # zero weights (a sparse file)
os.makedirs(os.path.join(work, "dev/data/tinyshakespeare"))
rng = random.Random(0)
for split, n in (("train", 200000), ("val", 40000)):
    with open(os.path.join(work, f"dev/data/tinyshakespeare/tiny_shakespeare_{split}.bin"), "wb") as f:
        f.write(struct.pack("256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"{n}H", *(rng.randrange(V) for _ in range(n))))
PY
# llm.c prints "step k: train loss ... (took X ms)"; its step 20 starts a long sampling
# pass, so the run stops after `steps` training steps.
(cd "$work" && OMP_NUM_THREADS=2 ./train_gpt2 2>&1 | grep --line-buffered "^step" | head -n "$steps") > "$work/llmc.txt" || true
cat "$work/llmc.txt"
"$here/build/bin/triad-bench" step --model gpt2-124m --batch 4 --seq 64 --threads 2 --steps "$steps" --warmup 1 \
  > "$work/triad.txt"
tail -n 3 "$work/triad.txt" | head -n 2
python3 - "$work/llmc.txt" "$work/triad.txt" <<'PY'
import json, re, statistics, sys
llmc = [float(m) for m in re.findall(r"took ([0-9.]+) ms", open(sys.argv[1]).read())][1:]  # step 0 warms up
triad = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
llmc_ms = statistics.median(llmc)
print(json.dumps({"bench": "step-vs-llmc", "shape": "gpt2-124m B4 T64 fp32 2 threads",
                  "llmc_step_ms_median": llmc_ms, "triad_step_ms_median": triad["step_ms_median"],
                  "speedup_vs_llmc": llmc_ms / triad["step_ms_median"], "triad_peak_rss_mb": triad["peak_rss_mb"]}))
PY
