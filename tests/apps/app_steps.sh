# shellcheck shell=bash
# Sourced by the tests that run triad's programs step by step (check_hf_import.sh,
# check_hf_roundtrip.sh, check_zeroquant.sh): a scratch folder $work removed at exit, one
# OpenMP thread per program, fail MESSAGE, and run LOG COMMAND... (the command's output into
# $work/LOG; its failure prints that log and fails the test).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
fail() { echo "FAILED: $*"; exit 1; }
run() {
  local log=$1
  shift
  "$@" >"$work/$log" 2>&1 || { cat "$work/$log"; fail "$log: $* exited non-zero"; }
}
