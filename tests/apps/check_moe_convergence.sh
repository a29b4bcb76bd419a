#!/usr/bin/env bash
# Mixture-of-Experts converges as DeepSpeed-MoE reports: `make demo`'s model trained STEPS
# steps (1000) dense, with 8 experts top-1 in every other block (the same active FLOPs per
# token, plus the gate's), and as PR-MoE (a pyramid of 4 then 8 experts with a residual MLP:
# fewer parameters than the standard MoE). The MoE model ends below the dense model's
# validation loss, and PR-MoE within 1% of the standard MoE's. Prints the three curves.
#   check_moe_convergence.sh BIN_DIR REPO_DIR [STEPS]
set -euo pipefail
bin=$1 repo=$2 steps=${3:-1000}
source "$(dirname "$0")/app_steps.sh"
export OMP_NUM_THREADS=2
corpus "$bin" 2048 /usr/share/games/fortunes %

train() {  # name, extra flags...
  local name=$1
  shift
  "$bin/triad-train" --config "$repo/configs/demo.json" --set data.corpus="$work/tokens.bin" \
    --set data.tokenizer="$work/tok.json" --set steps="$steps" --set eval_interval=$((steps / 10)) \
    --set log_interval=100 --set output_dir="$work/$name-model" --metrics "$work/$name.jsonl" "$@" \
    >"$work/$name.log" 2>&1 || { echo "FAIL: $name"; tail -20 "$work/$name.log"; exit 1; }
}
train dense
train moe --set model.moe.num_experts=8 --set model.moe.every=2
train prmoe --set "model.moe.num_experts=[4,8]" --set model.moe.every=2 --set model.moe.use_residual=true
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
curves = {}
for name in ("dense", "moe", "prmoe"):
    curves[name] = [(j["step"], j["val_loss"]) for j in map(json.loads, open(f"{work}/{name}.jsonl")) if "val_loss" in j]
print("step   " + "  ".join(f"{n:>8}" for n in curves))
for i, (step, _) in enumerate(curves["dense"]):
    print(f"{step:<6} " + "  ".join(f"{curves[n][i][1]:8.4f}" for n in curves))
params = {}
for name in ("dense", "moe", "prmoe"):
    for line in open(f"{work}/{name}.log"):
        if line.startswith("model:"):
            params[name] = line.split(",")[1].strip()
print("parameters:", params)
d, m, p = (curves[n][-1][1] for n in ("dense", "moe", "prmoe"))
ok = m < d and abs(p - m) / m <= 0.01
print(f"final: dense {d:.4f}, MoE {m:.4f} ({m / d - 1:+.4f}), PR-MoE {p:.4f} ({p / m - 1:+.4f} of MoE): "
      f"{'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
