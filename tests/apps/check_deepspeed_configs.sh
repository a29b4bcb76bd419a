#!/usr/bin/env bash
# Configs written the way DeepSpeed's documentation writes them (tests/data/deepspeed_configs:
# each ZeRO stage, f32/bf16/fp16, every scheduler, Adam's L2 mode and OneCycle's momentum)
# train for 12 steps on 4 ranks through
# `triad-train --config model.json --deepspeed <file>`, and every step's learning rate in the
# metrics equals the one DeepSpeed's documented formula gives (evaluated here, in Python,
# as DeepSpeed steps its scheduler: optimizer step s takes the rate of iteration s - 1).
#   check_deepspeed_configs.sh BIN_DIR CONFIG_DIR
set -euo pipefail
bin=$(cd "$1" && pwd) configs=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

"$bin/triad-data" tokenizer --corpus /usr/share/common-licenses --vocab-size 300 --out "$work/tok.json" >/dev/null
"$bin/triad-data" encode --tokenizer "$work/tok.json" --corpus /usr/share/common-licenses --out "$work/tokens.bin" >/dev/null
cd "$work"  # csv_monitor's relative output_path lands here
for ds in "$configs"/zero*.json; do
  name=$(basename "$ds" .json)
  if ! mpirun -np 4 --oversubscribe --bind-to none "$bin/triad-train" --config "$configs/model.json" --deepspeed "$ds" \
      --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --metrics "$work/$name.jsonl" \
      >"$work/$name.log" 2>&1; then
    echo "FAIL: $name"; cat "$work/$name.log"; exit 1
  fi
  python3 - "$ds" "$work/$name.jsonl" <<'PY'
import json, math, sys
ds, metrics = json.load(open(sys.argv[1])), [json.loads(l) for l in open(sys.argv[2])]
s, p = ds["scheduler"]["type"], ds["scheduler"].get("params", {})
lr0 = ds["optimizer"]["params"]["lr"]
W = max(2, p.get("warmup_num_steps", 1000))
def gamma(i):
    return math.log(i + 1) / math.log(W) if p.get("warmup_type", "log") == "log" else i / W
def rate(i):  # the schedule's rate at batch iteration i (DeepSpeed's lr_schedules.py docs)
    if s in ("WarmupLR", "WarmupDecayLR"):
        lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", 0.001)
        if i < 0: return lo
        if i < W: return lo + (hi - lo) * gamma(i)
        if s == "WarmupLR": return hi
        T = p["total_num_steps"]
        return lo + (hi - lo) * max(0.0, (T - i) / max(1.0, T - W))
    if s == "WarmupCosineLR":
        if i < 0: return 0.0
        wmin, cmin, T = p.get("warmup_min_ratio", 0.0), p.get("cos_min_ratio", 0.0001), p["total_num_steps"]
        if i < W: return lr0 * (wmin + gamma(i) * (1 - wmin))
        return lr0 * max(0.0, cmin + (1 - cmin) * (1 + math.cos(math.pi * (i - W + 1) / (T - W))) / 2)
    if s == "OneCycle":
        lo, hi = p["cycle_min_lr"], p["cycle_max_lr"]
        first = p.get("cycle_first_step_size", 2000); size = first + p.get("cycle_second_step_size", first)
        if i < 0: return lo
        if i < size:
            b = i + 1; x = 1 + b / size - math.floor(1 + b / size); r = first / size
            return lo + (hi - lo) * (x / r if x <= r else (x - 1) / (r - 1))
        if p.get("decay_step_size", 0) == 0 or p.get("decay_lr_rate", 0) == 0: return lo
        return lo / (1 + p["decay_lr_rate"] * (i - size + 1) / p["decay_step_size"])
    if s == "LRRangeTest":
        lo = p.get("lr_range_test_min_lr", 1e-3)
        if i < 0: return lo
        n = (i + 1) / p.get("lr_range_test_step_size", 2000)
        if p.get("lr_range_test_staircase", False): n = math.floor(n)
        return lo * (1 + p.get("lr_range_test_step_rate", 1.0) * n)
    raise SystemExit("unknown scheduler " + s)
bad = [(m["step"], m["lr"], rate(m["step"] - 2)) for m in metrics
       if abs(m["lr"] - rate(m["step"] - 2)) > 1e-12 * max(1.0, abs(rate(m["step"] - 2)))]
if len(metrics) != 12 or bad:
    raise SystemExit("FAIL: %s: %d steps; learning rates off (step, got, want): %s" % (sys.argv[1], len(metrics), bad))
print("%s: 12 steps, learning rates as DeepSpeed's %s gives them, last loss %.4f" % (
    sys.argv[1].split("/")[-1], s, metrics[-1]["loss"]))
# csv_monitor: DeepSpeed's files, read back with Python's csv module.
monitor = ds.get("csv_monitor", {})
if monitor.get("enabled"):
    import csv, os
    folder = os.path.join(monitor.get("output_path", ""), monitor.get("job_name", "DeepSpeedJobName"))
    batch = ds.get("train_batch_size") or ds["train_micro_batch_size_per_gpu"] * ds.get("gradient_accumulation_steps", 1) * 4
    for name, key in (("train_loss", "loss"), ("lr", "lr")) + ((("loss_scale", "loss_scale"),) if "fp16" in ds else ()):
        rows = list(csv.reader(open(os.path.join(folder, "Train_Samples_%s.csv" % name))))
        want = [["step", name]] + [[str(m["step"] * batch), m[key]] for m in metrics]
        if rows[0] != want[0] or len(rows) != len(want) or any(
                r[0] != w[0] or abs(float(r[1]) - w[1]) > 1e-12 * max(1.0, abs(w[1])) for r, w in zip(rows[1:], want[1:])):
            raise SystemExit("FAIL: csv_monitor's %s file differs: %s" % (name, rows[:3]))
    print("  csv_monitor: Train_Samples_{train_loss,lr,...}.csv hold each step's values by samples")
PY
done
