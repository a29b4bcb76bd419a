#!/usr/bin/env bash
# A preempted run resumes on the uninterrupted trajectory (Note [Preemption],
# src/train/preemption.h): a 2-rank triad-train run gets SIGNAL once step 3 is logged
# (usr1: SIGUSR1 to mpirun, which passes it to the ranks, as the Slurm script does; term:
# SIGTERM to rank 1 alone, as scancel's may land). It must exit with status 75 having
# written a checkpoint; resumed with --resume auto it runs to the end, and its losses at
# every step equal those of a run never interrupted (within 1e-6).
#   preempt_resume.sh BIN_DIR CONFIG MPIEXEC SIGNAL
bin=$1 config=$2 mpiexec=$3 signal=$4
source "$(dirname "$0")/mpi_job.sh"
make_corpus "$bin"
train() {  # train NAME [options]: a 2-rank run of 300 steps (long enough that the signal lands
  # well before its end), checkpoints only when stopped
  local name=$1
  shift
  "$mpiexec" -np 2 --oversubscribe --bind-to none "$bin/triad-train" --config "$config" \
    --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --set model.vocab_size=300 \
    --set eval_interval=0 --set log_interval=1 --steps 300 --save-dir "$work/$name.ckpt" \
    --metrics "$work/$name.jsonl" "$@"
}

train whole >"$work/whole.log" 2>&1 || fail "the uninterrupted run failed: $(cat "$work/whole.log")"

train stopped >"$work/log" 2>&1 &
job=$!
for _ in $(seq 3000); do  # up to 150 s to log step 3, however loaded the machine
  grep -Eq "^step +3/" "$work/log" && break
  kill -0 "$job" 2>/dev/null || fail "the run ended before step 3"
  sleep 0.05
done
mpirun=$(pgrep -P "$job")  # $job is the subshell that runs train()
[[ -n $mpirun ]] || fail "mpirun not found"
case $signal in
  usr1) kill -USR1 "$mpirun" ;;
  term)
    rank1=
    for pid in $(pgrep -P "$mpirun"); do
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && rank1=$pid
    done
    [[ -n $rank1 ]] || fail "rank 1 not found under mpirun"
    kill -TERM "$rank1"
    ;;
  *) fail "SIGNAL must be usr1 or term, got $signal" ;;
esac
status=0
wait "$job" || status=$?
job=
((status == 75)) || fail "the signalled run exited with status $status, not 75"
grep -q "a preemption signal came: stopping" "$work/log" || fail "no message says why the run stopped"
grep -Eq "^preempted: stopped after step [0-9]+ on a signal; checkpoint " "$work/log" || fail "no checkpoint named"
stopped_at=$(sed -nE 's/^preempted: stopped after step ([0-9]+) on a signal.*/\1/p' "$work/log")
((stopped_at < 300)) || fail "the run went to the end ($stopped_at steps)"

train stopped --resume auto >"$work/resume.log" 2>&1 || fail "the resumed run failed: $(cat "$work/resume.log")"
python3 - "$work/whole.jsonl" "$work/stopped.jsonl" "$stopped_at" <<'PY'
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        row = json.loads(line)
        out[row["step"]] = row["loss"]
    return out
whole, stopped = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(whole) == list(range(1, 301)), sorted(whole)
assert sorted(stopped) == list(range(1, 301)), f"steps logged across the stop and the resume: {sorted(stopped)}"
worst = max(abs(whole[s] - stopped[s]) for s in whole)
assert worst <= 1e-6, f"losses differ by up to {worst}"
print(f"stopped after step {sys.argv[3]}, resumed: 300 losses equal the uninterrupted run's (max |diff| {worst:.1e})")
PY
