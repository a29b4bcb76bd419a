#!/usr/bin/env bash
# Nothing leaks over a long run: a 4-rank triad-train run of STEPS steps (tp 2 x dp 2,
# ZeRO-3), checkpointing every 100 steps (keep 3) and validating every 50, has each rank's
# resident memory (VmRSS), open file descriptors and threads sampled after each save; the
# last third's maximum of each must be within 2% of the first third's, and the checkpoint
# folder must hold exactly 3 checkpoints at the end.
#   soak.sh BIN_DIR CONFIG MPIEXEC STEPS
bin=$1 config=$2 mpiexec=$3 steps=$4
source "$(dirname "$0")/mpi_job.sh"
make_corpus "$bin"
ckpt=$work/ckpt
"$mpiexec" -np 4 --oversubscribe --bind-to none "$bin/triad-train" --config "$config" \
  --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --set model.vocab_size=300 \
  --set model.tensor_parallel=2 --set zero_optimization.stage=3 --set eval_interval=50 --set eval_iters=1 \
  --set log_interval=100 --set checkpoint.every=100 --set checkpoint.keep=3 --save-dir "$ckpt" \
  --steps "$steps" >"$work/log" 2>&1 &
job=$!

# The ranks: mpirun's children that are in its world.
ranks=()
for _ in $(seq 1200); do  # up to 60 s for the 4 ranks to start
  ranks=()
  for pid in $(pgrep -P "$job"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=" && ranks+=("$pid")
  done
  ((${#ranks[@]} == 4)) && break
  running "$job" || fail "the run ended before its 4 ranks started"
  sleep 0.05
done
((${#ranks[@]} == 4)) || fail "found ${#ranks[@]} ranks under mpirun, expected 4"

# sample STEP: a line "STEP PID RSS_KB FDS THREADS" per rank into $work/samples.
sample() {
  local pid rss threads fds
  for pid in "${ranks[@]}"; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
    fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
    echo "$1 $pid $rss $fds $threads" >>"$work/samples"
  done
}
last=0
while running "$job"; do
  # Right after a checkpoint is saved: then no save or validation is under way on any rank
  # (the save ends with a collective call), whose files and threads come and go.
  step=$(grep -oE "^step +[0-9]+ \| saved" "$work/log" | tail -1 | grep -oE "[0-9]+" || true)
  if [[ -n $step ]] && ((step >= last + 100 && step < steps)); then
    last=$step
    sample "$step" 2>/dev/null || true  # a rank may end between the check and the sample
  fi
  sleep 0.05
done
status=0
wait "$job" || status=$?
job=
((status == 0)) || fail "the run failed (status $status)"

n=$(awk '{print $1}' "$work/samples" | sort -un | wc -l)
((n >= steps / 100 - 1)) || fail "only $n samples were taken (of every 100 of $steps steps)"
# For each rank and quantity: the first third's and the last third's maximum of the samples.
awk -v n="$n" '
  { if (!($1 in idx)) idx[$1] = ++count; k = idx[$1]; third = k <= n / 3 ? 1 : (k > n - n / 3 ? 3 : 2)
    for (q = 3; q <= 5; ++q) if ($q > max[$2, q, third]) max[$2, q, third] = $q; pids[$2] = 1 }
  END {
    split("rss_kb fds threads", name, " "); bad = 0
    for (p in pids) for (q = 3; q <= 5; ++q) {
      first = max[p, q, 1]; final = max[p, q, 3]
      printf "pid %s %s: first third max %d, last third max %d\n", p, name[q - 2], first, final
      if (final > first * 1.02) { print "FAIL: " name[q - 2] " of pid " p " grew more than 2%"; bad = 1 }
    }
    exit bad
  }' "$work/samples" || fail "a rank's memory, descriptors or threads grew: $(cat "$work/samples")"

files=$(find "$ckpt" -name 'step-*.h5' | wc -l)
((files == 3)) || fail "the checkpoint folder holds $files checkpoints, expected keep = 3: $(ls "$ckpt")"
if compgen -G "$ckpt/*.tmp" >/dev/null; then fail "a temporary file is left"; fi
echo "$steps steps: $n samples per rank, memory, descriptors and threads flat; 3 checkpoints kept"
