#!/usr/bin/env bash
# A save that cannot be written, under mpirun -np 2: into a tmpfs nearly full, into one
# with room for the datasets but not the whole file (the write fails part-way, inside
# parallel HDF5), and into one made read-only after the last save. With checkpoint.on_error
# "stop" every rank reports the file and the cause and the job exits non-zero; with
# "continue" it trains to the end. Either way no rank hangs, `latest` still names the
# previous checkpoint, which verifies, and no temporary file is left. Mounting a tmpfs
# needs root: the test is skipped (77) where it cannot.
#   save_fails.sh BIN_DIR CONFIG MPIEXEC
bin=$1 config=$2 mpiexec=$3
source "$(dirname "$0")/mpi_job.sh"
mnt=$work/mnt
mkdir -p "$mnt"
mount -t tmpfs -o size=64m tmpfs "$mnt" 2>/dev/null || {
  echo "cannot mount a tmpfs: skipped"
  exit 77
}
cleanup_mount() {
  umount "$mnt" 2>/dev/null || true
  cleanup
}
trap cleanup_mount EXIT
make_corpus "$bin"
ckpt=$mnt/ckpt
# train STEPS [options]: a 2-rank run resumed from the newest checkpoint, saving every 2
# steps; a hang fails the test after 120 s.
train() {
  local steps=$1
  shift
  timeout -k 5 120 "$mpiexec" -np 2 --oversubscribe --bind-to none "$bin/triad-train" --config "$config" \
    --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --set model.vocab_size=300 \
    --set eval_iters=1 --set checkpoint.every=2 --set checkpoint.keep=0 --save-dir "$ckpt" --resume auto \
    --steps "$steps" "$@" >"$work/log" 2>&1
}

train 2 || fail "the first run failed"
[[ $(cat "$ckpt/latest") == step-00000002.h5 ]] || fail "latest does not name step 2"
file_kb=$(du -sk "$ckpt/step-00000002.h5" | cut -f1)

# check_kept CAUSE LINES: the job's log names the failed file and CAUSE on LINES lines (once
# per rank when the job stops; once, by rank 0, when it continues), and the folder is as the
# first run left it.
check_kept() {
  [[ $(grep -c "step-00000004.h5.*$1" "$work/log") -ge $2 ]] || fail "the file and '$1' not named $2 times"
  [[ $(cat "$ckpt/latest") == step-00000002.h5 ]] || fail "latest changed"
  "$bin/triad-ckpt" verify "$ckpt" >/dev/null || fail "the previous checkpoint does not verify"
  if compgen -G "$ckpt/*.tmp" >/dev/null; then fail "a temporary file is left"; fi
  [[ ! -e $ckpt/step-00000004.h5 ]] || fail "a partial checkpoint is left"
}

# stop_and_continue CASE CAUSE
stop_and_continue() {
  local rc=0
  train 4 --set checkpoint.on_error=stop || rc=$?
  [[ $rc != 124 && $rc != 137 ]] || fail "$1, stop: the job hung"
  [[ $rc != 0 ]] || fail "$1, stop: the job succeeded"
  check_kept "$2" 2
  train 5 --set checkpoint.on_error=continue || fail "$1, continue: the job failed (status $?)"
  grep -q "checkpoint failed, training continues" "$work/log" || fail "$1, continue: the failure was not logged"
  check_kept "$2" 1
  echo "$1: stop exits non-zero naming the file and '$2' on every rank, continue trains to the end; latest kept"
}

# Nearly full: room for what is there and 16 kB more, far less than a checkpoint.
used_kb=$(du -sk "$mnt" | cut -f1)
mount -o remount,size=$((used_kb + 16))k "$mnt" || fail "cannot shrink the tmpfs"
stop_and_continue "nearly full" "No space left on device"

# Room for the datasets' bytes (the size the save checks for), not for the whole file.
data_bytes=$(grep -o "needs at least [0-9]* bytes" "$work/log" | head -1 | grep -o "[0-9]*")
[[ -n $data_bytes ]] || fail "the refusal does not say how many bytes the save needs"
[[ $((data_bytes / 1024 + 8)) -lt $file_kb ]] || fail "a checkpoint ($file_kb kB) is not larger than its datasets"
mount -o remount,size=$((used_kb + data_bytes / 1024 + 8))k "$mnt" || fail "cannot resize the tmpfs"
stop_and_continue "full part-way" "No space left on device"

mount -o remount,ro "$mnt" || fail "cannot make the tmpfs read-only"
stop_and_continue "read-only" "Read-only file system"
