# shellcheck shell=bash
# Sourced by the tests that watch a triad-train job under mpirun (stuck_rank.sh,
# preempt_resume.sh, kill_rank_mid_pipeline.sh, save_fails.sh, soak.sh; larger_than_memory.sh
# for its folder and corpus): a scratch folder $work removed at exit (cleanup), with the job
# ($job, mpirun or the subshell that runs it) and its ranks killed first; fail, running and
# make_corpus. A script may redefine stop_job before the exit.
set -euo pipefail
work=$(mktemp -d)
job=
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
stop_job() {
  pkill -KILL -P "$job" 2>/dev/null || true
  kill -KILL "$job" 2>/dev/null || true
}
cleanup() {
  if [[ -n $job ]]; then stop_job; fi
  rm -rf "$work"
}
trap cleanup EXIT
# fail MESSAGE: prints it and the job's log ($work/log), and ends the test.
fail() {
  echo "FAIL: $*"
  cat "$work/log" 2>/dev/null || true
  exit 1
}
# Whether a process runs: not gone, nor a zombie no one has reaped yet (dead either way).
running() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null || true)
  [[ -n $state && $state != Z* ]]
}
# make_corpus BIN_DIR: a 300-token tokenizer and token file of the licence texts, in $work.
make_corpus() {
  "$1/triad-data" tokenizer --corpus /usr/share/common-licenses --vocab-size 300 --out "$work/tok.json" >/dev/null
  "$1/triad-data" encode --tokenizer "$work/tok.json" --corpus /usr/share/common-licenses \
    --out "$work/tokens.bin" >/dev/null
}
