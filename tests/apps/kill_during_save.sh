#!/usr/bin/env bash
# A run killed (SIGKILL) at arbitrary moments while it saves a checkpoint after every step
# always leaves `latest` naming a checkpoint that verifies, and `--resume auto` continues
# from it to the end of the run.
#   kill_during_save.sh BIN_DIR CONFIG
set -euo pipefail
bin=$1 config=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

# A corpus and a model whose checkpoint (about 40 MB) takes far longer to save than a step.
"$bin/triad-data" tokenizer --corpus /usr/share/common-licenses --vocab-size 300 --out "$work/tok.json" >/dev/null
"$bin/triad-data" encode --tokenizer "$work/tok.json" --corpus /usr/share/common-licenses --out "$work/tokens.bin" >/dev/null
train=("$bin/triad-train" --config "$config" --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json"
  --set model.vocab_size=300 --set model.d_model=256 --set model.n_layer=4 --set model.seq_len=32
  --set train_batch_size=2 --set train_micro_batch_size_per_gpu=2 --set eval_iters=1 --set log_interval=1000
  --set checkpoint.every=1 --set checkpoint.keep=2 --save-dir "$work/ckpt" --resume auto)

# Each run resumes, is let save at least once more, and is killed a moment later: with a
# save every step, most kills land inside one.
interrupted=0
for delay in 0.2 0.45 0.7 0.95 1.2; do
  before=$(cat "$work/ckpt/latest" 2>/dev/null || true)
  "${train[@]}" --steps 100000 >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do  # up to 60 s for a new checkpoint, however loaded the machine
    [[ -e $work/ckpt/latest && $(cat "$work/ckpt/latest") != "$before" ]] && break
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: the run stopped by itself"; cat "$work/log"; exit 1; }
    sleep 0.1
  done
  sleep "$delay"
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  compgen -G "$work/ckpt/*.tmp" >/dev/null && interrupted=$((interrupted + 1))
  "$bin/triad-ckpt" verify "$work/ckpt" >/dev/null || { echo "FAIL: latest does not verify after a kill"; exit 1; }
done
step=$("$bin/triad-ckpt" inspect "$work/ckpt" | sed -n 's/^step: //p')
echo "killed five times ($interrupted while a save was being written); latest checkpoint at step $step verifies"
"${train[@]}" --steps $((step + 2)) >"$work/log" 2>&1 || { echo "FAIL: resuming failed"; cat "$work/log"; exit 1; }
grep -q "resumed from .* at step $step" "$work/log" || { echo "FAIL: did not resume at step $step"; cat "$work/log"; exit 1; }
if compgen -G "$work/ckpt/*.tmp" >/dev/null; then echo "FAIL: interrupted saves left temporary files"; exit 1; fi
echo "resumed at step $step and finished"
