#!/usr/bin/env bash
# The job scripts of jobs/slurm/ on a real one-node Slurm cluster of this machine
# (cluster.sh, its own state folder and ports), each submitted with sbatch --wait on a tiny
# model and corpus:
#   - train, cancelled (scancel) once its first checkpoint is written, then resubmitted
#     under the same name: the new job resumes from that checkpoint (step K > 0) and its
#     metrics reach the final step;
#   - train, sent the time-limit signal (USR1 to the batch shell): triad-train checkpoints
#     the step it is in and exits 75, the job requeues itself and,
#     under the same job id, resumes and finishes;
#   - collectives on 8 ranks (plain sbatch): its JSON line reports 0 wrong elements;
#   - zero-compare: a row for every stage at the job's rank count;
#   - scaling-weak and scaling-strong: scaling.csv with a row per point, and scaling.png
#     (not run when triad-bench has no scaling subcommand).
# Slurm that cannot be installed or started fails the test (it does not pass quietly).
#   test_jobs.sh BIN_DIR BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$(realpath "$1")
build=$(realpath "$2")
state=$build/slurm-test
work=""  # the jobs' folders, made once the cluster runs
started=$SECONDS

# Apart from a cluster started by hand in build/slurm (default port 16817).
export TRIAD_SLURM_PORT=16827
cluster=("$here/cluster.sh" --dir "$state")
# SLURM_CONF, and idle ranks yielding the cores they share (sbatch hands both to the jobs).
eval "$("${cluster[@]}" env)"
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

finish() {
  local status=$?
  if ((status != 0)); then
    local f
    for f in "$state"/log/slurmctld.log "$state"/log/slurmd.log; do
      [[ -f $f ]] && { echo "---- last lines of $(basename "$f") ----"; tail -n 15 "$f"; }
    done
  fi
  "${cluster[@]}" stop >/dev/null 2>&1 || true
  if [[ -n $work ]]; then
    if ((status == 0)); then rm -rf "$work"; else echo "(the jobs' folders are kept in $work)"; fi
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 143' TERM INT  # a killed test still stops its cluster

fail() {
  echo "FAIL: $*"
  exit 1
}
# show FILE...: prints files (a failed job's logs).
show() {
  local f
  for f in "$@"; do
    [[ -f $f ]] && { echo "---- $f ----"; tail -n 40 "$f"; }
  done
  return 0
}
step() { echo "[$((SECONDS - started)) s] $*"; }

if ! "${cluster[@]}" start; then
  fail "no Slurm cluster: slurm-wlm and munge could not be installed or their daemons did not start" \
    "(see above); this test needs them and does not pass without them"
fi

work=$(mktemp -d "$build/slurm-jobs.XXXXXX")
runs=$work/runs
export TRIAD_SLURM_SETTINGS=$work/settings.sh

# A corpus, and settings for small, quick jobs: the shipped file with a few values replaced.
"$bin/triad-data" tokenizer --corpus /usr/share/common-licenses --vocab-size 300 --out "$work/tok.json" >/dev/null
"$bin/triad-data" encode --tokenizer "$work/tok.json" --corpus /usr/share/common-licenses \
  --out "$work/tokens.bin" >/dev/null
steps=60
{
  cat "$root/jobs/slurm/settings.sh"
  cat <<EOF

# ---- the test's values ----
TASKS_PER_NODE=2
TIME=00:10:00
RUNS=$runs
BIN=$bin
CONFIG=configs/tiny.json
SETS="data.corpus=$work/tokens.bin data.tokenizer=$work/tok.json model.vocab_size=300 eval_interval=1000 log_interval=10"
CHECKPOINT_EVERY=5
TRAIN_OPTIONS="--steps $steps"
BENCH_BATCH=4
BENCH_SEQ=16
BENCH_STEPS=2
BENCH_WARMUP=1
SCALING_STAGES=0,3
COLLECTIVES_OPTIONS="--min-bytes 8 --max-bytes 1K --factor 8 --warmup 1 --iters 2 --rounds 1"
EOF
} >"$work/settings.sh"

submit() { "$root/jobs/slurm/submit.sh" "$@"; }
job_id_of() { sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' <<<"$1"; }
job_state() { squeue -h -j "$1" -o %T 2>/dev/null || true; }

# wait_for_file FILE JOB: until FILE exists; fails when JOB ends first or after 90 s.
wait_for_file() {
  local i
  for ((i = 0; i < 450; i++)); do
    [[ -e $1 ]] && return 0
    case $(job_state "$2") in
      PENDING | CONFIGURING | RUNNING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED) ;;
      *)
        [[ -e $1 ]] || fail "job $2 ended before $1 appeared"
        return 0
        ;;
    esac
    sleep 0.2
  done
  fail "$1 did not appear within 90 s"
}

# wait_until_gone JOB [SECONDS]: until JOB is no longer pending, running or completing.
wait_until_gone() {
  local i s
  for ((i = 0; i < ${2:-60} * 5; i++)); do
    s=$(job_state "$1")
    [[ -z $s || $s == CANCELLED || $s == COMPLETED || $s == FAILED || $s == TIMEOUT ]] && return 0
    sleep 0.2
  done
  fail "job $1 still $(job_state "$1") after ${2:-60} s"
}

# The last step in a metrics file (0 when it has none).
last_step() { python3 -c 'import json,sys; print(max([json.loads(l)["step"] for l in open(sys.argv[1]) if l.strip()] or [0]))' "$1"; }

# ---- train: cancelled after its first checkpoint, resubmitted, resumes ----
# The first job's step 6 takes kPauseSeconds (src/train/stall_hook.h): the test cancels it
# (or signals it, below) after the checkpoint of step 5, before it can end, however fast
# the machine runs the other steps.
step "train: submit, cancel after the first checkpoint, resubmit"
out=$(TRIAD_STALL=0:6:pause submit train --job-name resume)
first=$(job_id_of "$out")
[[ -n $first ]] || fail "submit.sh train printed no job id: $out"
wait_for_file "$runs/resume/ckpt/latest" "$first"
scancel "$first"
wait_until_gone "$first"
done_steps=$(last_step "$runs/resume/$first/metrics.jsonl")
((done_steps < steps)) || fail "job $first reached step $done_steps before it could be cancelled"
[[ $(job_state "$first") == CANCELLED || -z $(job_state "$first") ]] || fail "job $first ended $(job_state "$first"), not CANCELLED"
if ! out=$(submit train --job-name resume --wait); then
  show "$runs/resume"/*/job.log
  fail "the resubmitted train job failed: $out"
fi
second=$(job_id_of "$out")
log=$runs/resume/$second/job.log
k=$(sed -n 's/^resumed from .* at step \([0-9]*\)\( in [0-9.]* s\)\{0,1\}$/\1/p' "$log" | tail -n 1)
[[ -n $k ]] || {
  show "$log"
  fail "job $second did not say 'resumed from ... at step K'"
}
((k > 0)) || fail "job $second resumed at step $k, not after the first job's checkpoints"
[[ $(last_step "$runs/resume/$second/metrics.jsonl") == "$steps" ]] || fail "job $second's metrics end before step $steps"
[[ $(head -n 1 "$runs/resume/$second/metrics.jsonl") == *"\"step\":$((k + 1)),"* ]] ||
  fail "job $second's metrics do not start at step $((k + 1))"
"$bin/triad-ckpt" verify "$runs/resume/ckpt" >/dev/null || fail "the final checkpoint does not verify"
[[ -f $runs/resume/ckpt/step-$(printf %08d "$steps").h5 ]] || fail "no checkpoint of step $steps"
[[ -f $runs/resume/slurm-$second.out && -f $runs/resume/$second/settings.sh ]] ||
  fail "job $second left no Slurm output or settings copy"
echo "cancelled job $first at step $done_steps; job $second resumed at step $k and reached step $steps"

# ---- train: the time-limit signal requeues the job, which resumes under the same id ----
step "train: USR1 (as --signal sends it near the time limit) requeues the job"
# The signal comes during the pause of step 6; the requeued job resumes after it.
out=$(TRIAD_STALL=0:6:pause submit train --job-name requeue)
id=$(job_id_of "$out")
wait_for_file "$runs/requeue/ckpt/latest" "$id"
scancel --batch --signal=USR1 "$id"
# Requeued, it waits a few seconds (cred_expire in cluster.sh) before it runs again.
for ((i = 0; i < 600; i++)); do
  info=$(scontrol -o show job "$id" 2>/dev/null || true)
  [[ $info == *JobState=COMPLETED* || $info == *JobState=FAILED* || $info == *JobState=CANCELLED* ]] && break
  sleep 0.2
done
log=$runs/requeue/$id/job.log
[[ $info == *JobState=COMPLETED* ]] || {
  show "$log"
  fail "job $id did not complete after the requeue: $info"
}
[[ $info == *Restarts=1* ]] || fail "job $id was not restarted once: $info"
grep -q "preempted: requeueing job $id" "$log" || fail "job $id's log does not show the requeue"
k=$(sed -n 's/^resumed from .* at step \([0-9]*\)\( in [0-9.]* s\)\{0,1\}$/\1/p' "$log" | tail -n 1)
if [[ -z $k ]] || ((k == 0)); then
  show "$log"
  fail "requeued job $id did not resume from a checkpoint"
fi
grep -q "^preempted: stopped after step $k on a signal; checkpoint " "$log" ||
  fail "job $id did not resume from the checkpoint its signal wrote (step $k)"
[[ $(last_step "$runs/requeue/$id/metrics.jsonl") == "$steps" ]] || fail "job $id's metrics end before step $steps"
echo "job $id requeued itself and resumed at step $k under the same id"

# ---- collectives: plain sbatch, 8 ranks on the 8 CPUs the node declares ----
step "collectives: 8 ranks"
if ! out=$(cd "$root" && sbatch --wait --ntasks=8 --output="$work/collectives-%j.out" jobs/slurm/collectives.sbatch); then
  show "$work"/collectives-*.out
  fail "the collectives job failed: $out"
fi
id=$(job_id_of "$out")
python3 - "$runs/collectives/$id/collectives.json" <<'EOF' || fail "the collectives job's results are wrong (above)"
import json, sys
j = json.load(open(sys.argv[1]))
ops = {r["op"] for r in j["rows"]}
expected = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "sendrecv"}
assert ops == expected, "ops %s, expected %s" % (sorted(ops), sorted(expected))
s = j["summary"]
assert s["total_wrong"] == 0 and s["total_raw_wrong"] == 0, "wrong elements: %s" % s
print("collectives: %d rows on 8 ranks, 0 wrong" % len(j["rows"]))
EOF

# ---- zero-compare and scaling (weak, strong): submitted together, on the node's 8 CPUs ----
modes=(weak strong)
if ! "$bin/triad-bench" scaling --help >/dev/null 2>&1; then
  echo "NOTE: this triad-bench has no scaling subcommand; scaling-weak and scaling-strong not run"
  modes=()
fi
step "zero-compare (2 ranks) and scaling ${modes[*]} (ranks 1,2, stages 0,3), submitted together"
declare -A id_of  # job -> id
for job in zero-compare "${modes[@]/#/scaling-}"; do
  out=$(submit "$job")
  id_of[$job]=$(job_id_of "$out")
  [[ -n ${id_of[$job]} ]] || fail "submit.sh $job printed no job id: $out"
done
for job in "${!id_of[@]}"; do wait_until_gone "${id_of[$job]}" 180; done

id=${id_of[zero-compare]}
[[ -f $runs/zero-compare/$id/zero.json ]] || {
  show "$runs/zero-compare/$id/job.log"
  fail "the zero-compare job wrote no zero.json"
}
python3 - "$runs/zero-compare/$id/zero.json" <<'EOF' || fail "zero-compare's results are incomplete (above)"
import json, sys
j = json.load(open(sys.argv[1]))
got = sorted((r["ranks"], r["stage"]) for r in j["rows"])
assert got == [(2, s) for s in range(4)], "rows for (ranks, stage): %s" % got
assert all(r["step_ms_median"] > 0 for r in j["rows"])
print("zero-compare: stages 0-3 on 2 ranks")
EOF

for mode in "${modes[@]}"; do
  id=${id_of[scaling-$mode]}
  dir=$runs/scaling-$mode/$id
  [[ -f $dir/scaling.csv ]] || {
    show "$dir/job.log"
    fail "the scaling-$mode job wrote no scaling.csv"
  }
  rows=$(($(wc -l <"$dir/scaling.csv") - 1))
  ((rows == 4)) || fail "scaling-$mode: $dir/scaling.csv has $rows rows, expected 4 (ranks 1,2 x stages 0,3)"
  [[ $(head -c 4 "$dir/scaling.png" | od -An -c | tr -d ' ') == 211PNG ]] || fail "scaling-$mode: no PNG in $dir/scaling.png"
  echo "scaling-$mode: 4 points, scaling.csv and scaling.png"
done

step "all Slurm jobs passed"
