#!/usr/bin/env bash
# ZeRO++ converges as ZeRO-3 does: `make demo`'s model trained STEPS steps (1000) on 4 ranks
# emulating 2 nodes, once at ZeRO-3 and once with qwZ, hpZ and qgZ, every group partitioned;
# the final validation losses agree within 2% (DeepSpeed's own test accepts 10%). The ZeRO++
# run resumed from its checkpoint at half way ends at the uninterrupted run's validation
# loss (within 1e-5 relative: quantization is deterministic).
#   check_zeropp_convergence.sh BIN_DIR REPO_DIR [STEPS]
set -euo pipefail
bin=$1 repo=$2 steps=${3:-1000}
source "$(dirname "$0")/app_steps.sh"
corpus "$bin" 2048 /usr/share/games/fortunes %

half=$((steps / 2))
train() {  # name, extra flags...
  local name=$1
  shift
  mpirun -np 4 --oversubscribe --bind-to none "$bin/triad-train" --config "$repo/configs/demo.json" \
    --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --set steps="$steps" \
    --set train_micro_batch_size_per_gpu=4 --set eval_interval="$half" --set log_interval=100 \
    --set zero_optimization.stage=3 --set zero_optimization.stage3_param_persistence_threshold=0 \
    --set cluster.ranks_per_node=2 --set output_dir="$work/$name-model" --metrics "$work/$name.jsonl" "$@" \
    >"$work/$name.log" 2>&1 || { echo "FAIL: $name"; tail -20 "$work/$name.log"; exit 1; }
}
final_val() { python3 -c "import json,sys; print([json.loads(l)['val_loss'] for l in open(sys.argv[1]) if 'val_loss' in l][-1])" "$1"; }

zeropp=(--set zero_optimization.zero_quantized_weights=true --set zero_optimization.zero_hpz_partition_size=2
  --set zero_optimization.zero_quantized_gradients=true)
train zero3
train zeropp "${zeropp[@]}" --set checkpoint.every="$half" --save-dir "$work/ckpt"
train resumed "${zeropp[@]}" --save-dir "$work/ckpt-resumed" --resume "$work/ckpt/$(printf step-%08d.h5 "$half")"
a=$(final_val "$work/zero3.jsonl") b=$(final_val "$work/zeropp.jsonl") c=$(final_val "$work/resumed.jsonl")
echo "final validation loss after $steps steps: ZeRO-3 $a, ZeRO++ $b, ZeRO++ resumed at $half $c"
python3 - "$a" "$b" "$c" <<'PY'
import sys
a, b, c = map(float, sys.argv[1:])
ok = abs(b - a) / a <= 0.02 and abs(c - b) / b <= 1e-5
print(f"ZeRO++ / ZeRO-3 - 1 = {b / a - 1:+.4f} (within 0.02: {abs(b - a) / a <= 0.02}); resumed - uninterrupted = {c - b:+.2e}")
sys.exit(0 if ok else 1)
PY
