#!/usr/bin/env bash
# A rank that is alive but stuck ends the whole job through comm_timeout (Note [Collective
# deadline], src/parallel/watchdog.h): in a 4-rank triad-train run laid out as LAYOUT (tp:
# tp 2 x dp 2, pp: pp 2 x dp 2) with comm_timeout 10, rank 2 stalls at the start of step 3
# (TRIAD_STALL: MODE stop = SIGSTOP, spin = a busy loop). Within 30 s of the stall mpirun
# must exit non-zero, a waiting rank must have named its call, the call's number and its
# group's axis, and no rank may be left.
#   stuck_rank.sh BIN_DIR CONFIG MPIEXEC LAYOUT MODE
bin=$1 config=$2 mpiexec=$3 layout=$4 mode=$5
source "$(dirname "$0")/mpi_job.sh"
make_corpus "$bin"

case $layout in
  tp) grid=(--set model.tensor_parallel=2) ;;
  pp) grid=(--set pipeline.stages=2) ;;
  *) fail "LAYOUT must be tp or pp, got $layout" ;;
esac
TRIAD_STALL="2:3:$mode" "$mpiexec" -np 4 --oversubscribe --bind-to none "$bin/triad-train" --config "$config" \
  --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --set model.vocab_size=300 \
  "${grid[@]}" --set comm_timeout=10 --set eval_interval=0 --set log_interval=1 --steps 1000 >"$work/log" 2>&1 &
job=$!
ranks=$(for _ in $(seq 3000); do  # up to 150 s to reach the stall, however loaded the machine
  if grep -q "TRIAD_STALL: $mode at step 3" "$work/log"; then pgrep -P "$job" | tr '\n' ' '; break; fi
  running "$job" || break
  sleep 0.05
done)
grep -q "TRIAD_STALL: $mode at step 3" "$work/log" || fail "rank 2 did not reach its stall within 150 s"
start=$(date +%s%N)
elapsed_ms() { echo $((($(date +%s%N) - start) / 1000000)); }
while running "$job"; do
  (($(elapsed_ms) < 30000)) || fail "mpirun still runs 30 s after rank 2 stalled"
  sleep 0.1
done
status=0
wait "$job" || status=$?
job=
for pid in $ranks; do
  while running "$pid"; do
    (($(elapsed_ms) < 30000)) || fail "a rank (pid $pid) still runs 30 s after rank 2 stalled"
    sleep 0.1
  done
done
((status != 0)) || fail "mpirun exited 0"
pattern="rank [0-3]: error: \[comm_timeout\] [a-z_]+ #[0-9]+ on the (tp|dp|pp) group has waited"
grep -Eq "$pattern" "$work/log" || fail "no rank named the call it waited in"
echo "rank 2 stalled ($mode) in a $layout 2 x dp 2 run: mpirun exited with status $status after $(elapsed_ms) ms"
grep -E "$pattern" "$work/log" | head -3
