#!/usr/bin/env bash
# A rank that dies in the middle of a pipeline step ends the whole job: in a pp 2 x dp 2
# triad-train run, rank 2 (stage 1, dp rank 0) is killed (SIGKILL) inside a step, while the
# other ranks depend on it (rank 0 exchanges activations and gradients with it, rank 3
# reduces gradients with it, rank 1 waits on both). Within 30 s of the kill mpirun must exit
# non-zero and say which rank died and how, and every other rank must be gone. mpirun is
# what provides this (Open MPI aborts a job when one of its processes dies), so no rank
# stays blocked receiving from a peer that is gone.
#   kill_rank_mid_pipeline.sh BIN_DIR CONFIG MPIEXEC
bin=$1 config=$2 mpiexec=$3
source "$(dirname "$0")/mpi_job.sh"
declare -A pid_of  # rank -> pid
stop_job() {  # on a failure: mpirun takes its ranks down on SIGTERM; whatever is left is killed
  kill -TERM "$job" 2>/dev/null || true
  sleep 2
  kill -KILL "$job" "${pid_of[@]}" 2>/dev/null || true
}
make_corpus "$bin"

# A step of 8 micro-batches through a 13M-parameter model: seconds here, so that a kill
# right after the first step is logged lands inside the second (checked below).
"$mpiexec" -np 4 --oversubscribe --bind-to none "$bin/triad-train" --config "$config" \
  --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --set model.vocab_size=300 \
  --set model.d_model=512 --set model.n_layer=4 --set model.n_head=4 --set model.seq_len=128 \
  --set pipeline.stages=2 --set train_batch_size=32 --set train_micro_batch_size_per_gpu=2 \
  --set eval_interval=0 --set log_interval=1 --steps 1000 >"$work/log" 2>&1 &
job=$!
for _ in $(seq 3000); do  # up to 150 s to start and finish step 1, however loaded the machine
  grep -Eq "^step +1/" "$work/log" && break
  running "$job" || fail "the run stopped by itself"
  sleep 0.05
done
grep -Eq "^step +1/" "$work/log" || fail "step 1 was not logged within 150 s"

# The ranks are mpirun's children; each knows its rank from Open MPI's environment.
for pid in $(pgrep -P "$job"); do
  rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  [[ -n $rank ]] && pid_of[$rank]=$pid
done
[[ ${#pid_of[@]} -eq 4 ]] || fail "expected 4 ranks under mpirun, found ${#pid_of[@]}"

kill -KILL "${pid_of[2]}"
start=$(date +%s%N)
elapsed_ms() { echo $((($(date +%s%N) - start) / 1000000)); }
while running "$job"; do
  (($(elapsed_ms) < 30000)) || fail "mpirun still runs 30 s after rank 2 died"
  sleep 0.05
done
status=0
wait "$job" || status=$?
job=
job_ms=$(elapsed_ms)
for rank in 0 1 3; do
  while running "${pid_of[$rank]}"; do
    (($(elapsed_ms) < 30000)) || fail "rank $rank (pid ${pid_of[$rank]}) still runs 30 s after rank 2 died"
    sleep 0.05
  done
done
ranks_ms=$(elapsed_ms)

((status != 0)) || fail "mpirun exited 0 after rank 2 died"
grep -Eq "process rank 2 .* exited on signal 9" "$work/log" || fail "no message names rank 2's death"
if grep -Eq "^step +2/" "$work/log"; then fail "step 2 completed: the kill did not land inside a step"; fi
echo "rank 2 killed inside step 2: mpirun exited with status $status after ${job_ms} ms, the last rank was gone" \
  "after ${ranks_ms} ms"
grep -E "process rank 2 .* exited on signal 9" "$work/log"
