#!/usr/bin/env bash
# triad-compress zeroquant through the command line, with the programs that read its output:
#  - the reference GPT-2 and Llama files (tests/data/safetensors) import, quantize (W4A8
#    groups of 32, W8A16 groups of 8), verify, and triad-ckpt inspect shows the recipe and
#    the integer datasets;
#  - a model trained by triad-train, quantized W8A8, samples in triad-generate (its
#    tokenizer found through the recorded config), reports its held-out loss beside
#    triad-train's, and inspect shows its bytes in memory; quantized W4A8 after layer-by-layer
#    distillation on its corpus, it prints each block's loss, lower after LKD than after PTQ;
#    quantized W8A8 with --quantize-embeddings, its file holds the token table's integers and
#    no f32 table, it is evaluated, samples, and is smaller in memory than without;
#  - bad bit widths, a group size that does not divide a layer's input dimension,
#    --quantize-embeddings given to xtc, and a quantized model given to triad-train --resume
#    are refused by name.
#   check_zeroquant.sh BIN_DIR DATA_DIR CONFIG
set -euo pipefail
bin=$(cd "$1" && pwd) data=$(cd "$2" && pwd) config=$3
source "$(dirname "$0")/app_steps.sh"
refused() {  # refused PATTERN COMMAND...: the command fails and says PATTERN
  local pattern=$1
  shift
  if "$@" >"$work/refused" 2>&1; then fail "$* succeeded"; fi
  grep -Eq -- "$pattern" "$work/refused" || { cat "$work/refused"; fail "$* did not say /$pattern/"; }
}

run import_gpt2 "$bin/triad-ckpt" import --from "$data/gpt2" --arch gpt2 --out "$work/gpt2"
run import_llama "$bin/triad-ckpt" import --from "$data/llama" --arch llama --out "$work/llama"
run zq_gpt2 "$bin/triad-compress" zeroquant --checkpoint "$work/gpt2" --wbits 4 --abits 8 --group-size 32 \
  --out "$work/gpt2-w4a8"
run zq_llama "$bin/triad-compress" zeroquant --checkpoint "$work/llama" --wbits 8 --abits 16 --group-size 8 \
  --out "$work/llama-w8a16"
for model in gpt2-w4a8 llama-w8a16; do
  run "verify_$model" "$bin/triad-ckpt" verify "$work/$model/model.h5"
  run "inspect_$model" "$bin/triad-ckpt" inspect "$work/$model/model.h5"
done
grep -q '^quantized: zeroquant, W4A8, groups of 32 (symmetric)$' "$work/inspect_gpt2-w4a8" || fail "inspect: recipe"
grep -q '^/quantized/blocks.0.attn.qkv.weight/q  *(192, 32) *i8 ' "$work/inspect_gpt2-w4a8" || fail "inspect: W4 qkv"
grep -q '^/quantized/blocks.0.attn.qkv.weight/scales  *(192, 2) *f32 ' "$work/inspect_gpt2-w4a8" || fail "inspect: scales"
grep -q '^/model/wte.weight ' "$work/inspect_gpt2-w4a8" || fail "inspect: the embedding stays f32"
grep -q '^quantized: zeroquant, W8A16, groups of 8 (symmetric)$' "$work/inspect_llama-w8a16" || fail "inspect: llama"
grep -q '^/quantized/blocks.1.mlp.down.weight/q  *(16, 40) *i8 ' "$work/inspect_llama-w8a16" || fail "inspect: W8 down"

corpus "$bin" 300
train=("$bin/triad-train" --config "$config" --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json"
  --set model.vocab_size=300 --set eval_iters=1 --set log_interval=1000)
run train "${train[@]}" --steps 3 --set output_dir="$work/trained"
run zq_trained "$bin/triad-compress" zeroquant --checkpoint "$work/trained/model.h5" --wbits 8 --abits 8 \
  --group-size 16 --data "$work/tokens.bin" --eval-batches 1 --batch-size 4 --out "$work/trained-w8a8"
# --eval-batches 1 --batch-size 4 at the model's seq_len: triad-train's validation batch
# (eval_iters 1 of train_micro_batch_size_per_gpu 4), so the full-precision loss is its last one.
# In memory: 8-bit integers and an f32 scale and i32 sum per 16 = 1.5 bytes a weight, 4/1.5 of f32.
python3 - "$work" <<'PY' || fail "zeroquant --eval-batches"
import json, re, sys
work = sys.argv[1]
lines = open(f"{work}/zq_trained").read().splitlines()
j = json.loads(lines[-1])
trained = float(re.findall(r"val loss ([0-9.]+)", open(f"{work}/train").read())[-1])
assert j["recipe"]["wbits"] == 8 and j["eval_batches"] == 1, j
assert abs(j["baseline_val_loss"] - trained) <= 6e-5, (j, trained)
assert abs(j["val_loss"] / j["baseline_val_loss"] - 1 - j["relative"]) < 1e-12, j
assert 0 < abs(j["relative"]) < 0.05, j
assert any(l.startswith("val loss: W8A8 ") for l in lines), lines
PY
run inspect_trained "$bin/triad-ckpt" inspect "$work/trained-w8a8/model.h5"
grep -Eq '^in memory: [0-9]+ bytes, [0-9]+ in full precision .*quantized layers [0-9]+ bytes, [0-9]+ in f32 \(2\.67x\)$' \
  "$work/inspect_trained" || { cat "$work/inspect_trained"; fail "inspect: the bytes in memory"; }
run generate "$bin/triad-generate" --checkpoint "$work/trained-w8a8/model.h5" --prompt "The licence" \
  --max-new-tokens 12 --temperature 0 --threads 1
[[ $(wc -c <"$work/generate") -gt 12 ]] || fail "triad-generate printed nothing past the prompt"
# --quantize-embeddings: the token table (the tied head) W8 too: its integers in the file, no
# f32 table; evaluated on the quantized logits, sampled, and smaller in memory than without.
run zq_emb "$bin/triad-compress" zeroquant --checkpoint "$work/trained/model.h5" --wbits 8 --abits 8 \
  --group-size 16 --quantize-embeddings --data "$work/tokens.bin" --eval-batches 1 --batch-size 4 \
  --out "$work/trained-emb"
grep -q 'embeddings and output head quantized' "$work/zq_emb" || fail "zeroquant --quantize-embeddings: not reported"
python3 - "$work" <<'PY' || fail "zeroquant --quantize-embeddings --eval-batches"
import json, sys
work = sys.argv[1]
j = json.loads(open(f"{work}/zq_emb").read().splitlines()[-1])
w8a8 = json.loads(open(f"{work}/zq_trained").read().splitlines()[-1])
assert j["recipe"]["quantize_embeddings"] is True and w8a8["recipe"]["quantize_embeddings"] is False, (j, w8a8)
assert j["baseline_val_loss"] == w8a8["baseline_val_loss"], (j, w8a8)
assert 0 < abs(j["relative"]) < 0.05 and j["val_loss"] != w8a8["val_loss"], (j, w8a8)
PY
run inspect_emb "$bin/triad-ckpt" inspect "$work/trained-emb/model.h5"
grep -q '^quantized embeddings: the token table(s) and the output head$' "$work/inspect_emb" || fail "inspect: embeddings"
grep -q '^/quantized/wte.weight/q ' "$work/inspect_emb" || fail "inspect: the token table's integers"
if grep -q '^/model/wte.weight ' "$work/inspect_emb"; then fail "inspect: an f32 token table beside its integers"; fi
if grep -q '^quantized embeddings' "$work/inspect_trained"; then fail "inspect: embeddings shown without the flag"; fi
ratio() { sed -nE 's/^in memory: .*full precision \(([0-9.]+)x\).*/\1/p' "$1"; }
python3 -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" "$(ratio "$work/inspect_emb")" \
  "$(ratio "$work/inspect_trained")" || fail "inspect: not smaller in memory with the table quantized"
run generate_emb "$bin/triad-generate" --checkpoint "$work/trained-emb/model.h5" --prompt "The licence" \
  --max-new-tokens 12 --temperature 0 --threads 1
[[ $(wc -c <"$work/generate_emb") -gt 12 ]] || fail "triad-generate printed nothing past the prompt (embeddings)"
run lkd "$bin/triad-compress" zeroquant --checkpoint "$work/trained/model.h5" --wbits 4 --abits 8 --group-size 16 \
  --lkd-steps 20 --data "$work/tokens.bin" --lkd-batches 2 --batch-size 2 --seq-len 32 --out "$work/trained-lkd"
awk '/^LKD block/ { n++; if (!($9 < $6)) bad = 1 } END { exit !(n > 0 && !bad) }' "$work/lkd" \
  || { cat "$work/lkd"; fail "LKD did not lower every block's distillation loss"; }
run verify_lkd "$bin/triad-ckpt" verify "$work/trained-lkd/model.h5"
run inspect_lkd "$bin/triad-ckpt" inspect "$work/trained-lkd/model.h5"
grep -q '^layer-by-layer distillation: 20 steps per block$' "$work/inspect_lkd" || fail "inspect: the recipe lacks LKD"
if grep -q '^layer-by-layer distillation' "$work/inspect_gpt2-w4a8"; then fail "inspect: LKD shown for PTQ alone"; fi

refused '--wbits: 3 not in \{8,4\}' "$bin/triad-compress" zeroquant --checkpoint "$work/gpt2" --wbits 3 --out "$work/x"
refused '--abits: 4 not in \{8,16\}' "$bin/triad-compress" zeroquant --checkpoint "$work/gpt2" --abits 4 --out "$work/x"
refused 'group size 48 does not divide the input dimension 64 of blocks.0.attn.qkv.weight' \
  "$bin/triad-compress" zeroquant --checkpoint "$work/gpt2" --group-size 48 --out "$work/x"
refused '--eval-batches 2 needs --data' \
  "$bin/triad-compress" zeroquant --checkpoint "$work/gpt2" --eval-batches 2 --out "$work/x"
refused '--lkd-steps 5 needs --data' \
  "$bin/triad-compress" zeroquant --checkpoint "$work/gpt2" --lkd-steps 5 --out "$work/x"
refused 'group_size must be a positive multiple of 8, got 12' \
  "$bin/triad-compress" zeroquant --checkpoint "$work/gpt2" --group-size 12 --out "$work/x"

refused 'quantize_embeddings is built for zeroquant only' "$bin/triad-compress" xtc --teacher "$work/trained/model.h5" \
  --steps 1 --data "$work/tokens.bin" --quantize-embeddings --out "$work/x"

refused "is a quantized model \\(triad-compress\\): it runs inference only; training resumes from a full-precision checkpoint" \
  "${train[@]}" --steps 1 --resume "$work/trained-w8a8/model.h5" --set output_dir="$work/resumed"
echo "OK: zeroquant through triad-compress, triad-ckpt, triad-generate and triad-train"
