# shellcheck shell=bash
# Sourced by the tests that run triad's programs step by step (check_hf_import.sh,
# check_hf_roundtrip.sh, check_zeroquant.sh, check_xtc.sh, the slow convergence and quality
# checks): a scratch folder $work removed at exit, one OpenMP thread per program (a script
# may raise it after sourcing), fail MESSAGE, run LOG COMMAND... (the command's output into
# $work/LOG; its failure prints that log and fails the test), and corpus BIN_DIR VOCAB [FILES
# SEPARATOR] ($work/tok.json, a BPE tokenizer of VOCAB tokens trained on FILES, default the
# Debian licenses, one document a file; and $work/tokens.bin, FILES encoded with it).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
fail() { echo "FAILED: $*"; exit 1; }
run() {
  local log=$1
  shift
  "$@" >"$work/$log" 2>&1 || { cat "$work/$log"; fail "$log: $* exited non-zero"; }
}
corpus() {
  local bin=$1 vocab=$2 files=${3:-/usr/share/common-licenses} split=()
  [[ -z ${4:-} ]] || split=(--separator "$4")
  "$bin/triad-data" tokenizer --corpus "$files" "${split[@]}" --vocab-size "$vocab" --out "$work/tok.json" >/dev/null
  "$bin/triad-data" encode --tokenizer "$work/tok.json" --corpus "$files" "${split[@]}" --out "$work/tokens.bin" >/dev/null
}
