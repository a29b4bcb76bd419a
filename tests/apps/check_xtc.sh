#!/usr/bin/env bash
# triad-compress xtc through the command line:
#  - a model trained by triad-train is distilled into a ternary student with half its blocks
#    on 1 process, and on 2 ranks under mpirun at ZeRO-3 and ZeRO-1: every step's losses of
#    the 2-rank runs equal the 1-process run's within 1e-5 (relative);
#  - with --eval-batches the teacher's and the student's held-out losses, the same on 2 ranks;
#  - the student file verifies, triad-ckpt inspect shows the recipe, triad-generate samples
#    from it, and triad-ckpt export refuses it;
#  - --config takes the recipe from a compression_training section;
#  - bad bit widths, kept blocks out of range and a missing teacher are refused by name.
#   check_xtc.sh BIN_DIR CONFIG
set -euo pipefail
bin=$(cd "$1" && pwd) config=$2
source "$(dirname "$0")/app_steps.sh"
refused() {  # refused PATTERN COMMAND...: the command fails and says PATTERN
  local pattern=$1
  shift
  if "$@" >"$work/refused" 2>&1; then fail "$* succeeded"; fi
  grep -Eq -- "$pattern" "$work/refused" || { cat "$work/refused"; fail "$* did not say /$pattern/"; }
}
mpi=(mpirun -np 2 --oversubscribe --bind-to none)

corpus "$bin" 300
run train "$bin/triad-train" --config "$config" --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" \
  --set model.vocab_size=300 --set eval_iters=1 --set log_interval=1000 --steps 3 --set output_dir="$work/teacher"
base=(--threads 1 xtc --steps 4 --data "$work/tokens.bin" --batch-size 4 --seq-len 32 --lr 1e-3 --label-weight 0.5)
xtc=("${base[@]}" --teacher "$work/teacher/model.h5" --wbits 2 --keep-layers every:2)
run xtc1 "$bin/triad-compress" "${xtc[@]}" --out "$work/out1"
run xtc_z3 "${mpi[@]}" "$bin/triad-compress" "${xtc[@]}" --zero-stage 3 --out "$work/out_z3"
run xtc_z1 "${mpi[@]}" "$bin/triad-compress" "${xtc[@]}" --zero-stage 1 --out "$work/out_z1"
[[ $(grep -c '^step ' "$work/xtc1") == 4 ]] || { cat "$work/xtc1"; fail "xtc did not print 4 steps"; }
for run in xtc_z3 xtc_z1; do
  paste -d' ' <(grep '^step ' "$work/xtc1") <(grep '^step ' "$work/$run") | tr -d '(),' | awk '
    { n++; for (i = 4; i <= 13; i += 3) { a = $i; b = $(i + 13); d = a - b; if (d < 0) d = -d
        if (d > 1e-5 * (a < 0 ? -a : a) + 1e-7) { print "step " $2 ": " a " vs " b; bad = 1 } } }
    END { exit !(n == 4 && !bad) }' || { cat "$work/xtc1" "$work/$run"; fail "$run: the losses differ from 1 process"; }
done
# Held-out evaluation: the teacher's and the written student's losses, the same on 2 ranks.
run eval1 "$bin/triad-compress" "${xtc[@]}" --eval-batches 2 --eval-interval 2 --out "$work/out_eval1"
run eval_z3 "${mpi[@]}" "$bin/triad-compress" "${xtc[@]}" --eval-batches 2 --eval-interval 2 --zero-stage 3 \
  --out "$work/out_eval_z3"
python3 - "$work" <<'PY' || fail "xtc --eval-batches"
import json, sys
work = sys.argv[1]
one, two = (open(f"{work}/{r}").read().splitlines() for r in ("eval1", "eval_z3"))
a, b = json.loads(one[-1]), json.loads(two[-1])
for k in ("val_loss", "baseline_val_loss"):
    assert abs(a[k] - b[k]) <= 1e-5 * a[k], (k, a, b)
assert a["recipe"]["method"] == "xtc" and a["eval_tokens"] == 2 * 4 * 32, a
assert [l.split(":")[0] for l in one if "val loss" in l and l.startswith("step")] == ["step 2", "step 4"], one
PY
awk '/^step 1:/ { first = $4 } /^step 4:/ { last = $4 } END { exit !(last < first) }' "$work/xtc1" \
  || { cat "$work/xtc1"; fail "xtc did not lower the loss in 4 steps"; }

run verify "$bin/triad-ckpt" verify "$work/out1/model.h5"
run inspect "$bin/triad-ckpt" inspect "$work/out1/model.h5"
grep -q '^quantized: xtc, W2A8, a scale per row (symmetric)$' "$work/inspect" || fail "inspect: recipe"
grep -q '^xtc: 4 steps of distillation; kept blocks \[1\] of the teacher.s 2$' "$work/inspect" || fail "inspect: xtc"
grep -q '^/quantized/blocks.0.attn.qkv.weight/scales  *(.*, 1) *f32 ' "$work/inspect" || fail "inspect: row scales"
if grep -q '^/quantized/blocks.1' "$work/inspect"; then fail "inspect: the student has a second block"; fi
run generate "$bin/triad-generate" --checkpoint "$work/out1/model.h5" --prompt "The licence" \
  --max-new-tokens 12 --temperature 0 --threads 1
[[ $(wc -c <"$work/generate") -gt 12 ]] || fail "triad-generate printed nothing past the prompt"
refused "is a quantized model \\(triad-compress\\).*not weights to export" \
  "$bin/triad-ckpt" export "$work/out1/model.h5" --out "$work/x.h5"
refused "is a quantized model \\(triad-compress\\).*not weights to export" \
  "$bin/triad-ckpt" export "$work/out1/model.h5" --format safetensors --out "$work/x"

# --config: the recipe from a compression_training section (binary, 8-bit activations, block 1 kept).
cat >"$work/xtc.json" <<'JSON'
{"compression_training": {
  "weight_quantization": {"shared_parameters": {"enabled": true, "quantize_groups": 1},
                          "different_groups": {"wq1": {"params": {"start_bits": 1, "target_bits": 1}}}},
  "activation_quantization": {"shared_parameters": {"enabled": true}, "different_groups": {"aq1": {"params": {"bits": 8}}}},
  "layer_reduction": {"enabled": true, "keep_number_layer": 1, "teacher_layer": [1]}}}
JSON
run xtc_config "$bin/triad-compress" "${base[@]}" --teacher "$work/teacher/model.h5" --config "$work/xtc.json" \
  --out "$work/out_config"
run inspect_config "$bin/triad-ckpt" inspect "$work/out_config/model.h5"
grep -q '^quantized: xtc, W1A8, a scale per row (symmetric)$' "$work/inspect_config" || fail "inspect: --config's recipe"
grep -q '^xtc: 4 steps of distillation; kept blocks \[1\] of the teacher.s 2$' "$work/inspect_config" \
  || fail "inspect: --config's kept blocks"
refused "--wbits excludes --config" \
  "$bin/triad-compress" "${base[@]}" --teacher "$work/teacher/model.h5" --config "$work/xtc.json" --wbits 2 --out "$work/x"
sed -i 's/"target_bits": 1/"target_bits": 4/; s/"start_bits": 1/"start_bits": 4/' "$work/xtc.json"
refused "compression_training.weight_quantization.different_groups.wq1.params.target_bits must be 2 or 1 for xtc, got 4" \
  "$bin/triad-compress" "${base[@]}" --teacher "$work/teacher/model.h5" --config "$work/xtc.json" --out "$work/x"

teacher=(--teacher "$work/teacher/model.h5")
refused "xtc's wbits must be 2 or 1, got 3" "$bin/triad-compress" "${base[@]}" "${teacher[@]}" --wbits 3 --out "$work/x"
refused "--keep-layers '0,5': block 5 is out of range \\(the teacher has 2 blocks" \
  "$bin/triad-compress" "${base[@]}" "${teacher[@]}" --keep-layers 0,5 --out "$work/x"
refused "$work/none.h5" "$bin/triad-compress" "${base[@]}" --teacher "$work/none.h5" --out "$work/x"
echo "OK: xtc through triad-compress (1 process, 2 ranks at ZeRO-3 and ZeRO-1), triad-ckpt and triad-generate"
