#!/usr/bin/env bash
# A save into a nearly full tmpfs, and into one made read-only after the last save, under
# mpirun -np 2: with checkpoint.on_error "stop" every rank reports the file and the cause
# and the job exits non-zero; with "continue" it trains to the end; either way `latest`
# still names the previous checkpoint, which verifies, and no temporary file is left.
# Mounting a tmpfs needs root: the test is skipped (77) where it cannot.
#   save_fails.sh BIN_DIR CONFIG MPIEXEC
bin=$1 config=$2 mpiexec=$3
source "$(dirname "$0")/mpi_job.sh"
mnt=$work/mnt
mkdir -p "$mnt"
mount -t tmpfs -o size=64m tmpfs "$mnt" 2>/dev/null || { echo "cannot mount a tmpfs: skipped"; exit 77; }
stop_job() { :; }
cleanup_mount() {
  umount "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup_mount EXIT
make_corpus "$bin"
ckpt=$mnt/ckpt
train=("$mpiexec" -np 2 --oversubscribe --bind-to none "$bin/triad-train" --config "$config"
  --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --set model.vocab_size=300
  --set eval_iters=1 --set checkpoint.every=2 --set checkpoint.keep=0 --save-dir "$ckpt" --resume auto)

"${train[@]}" --steps 2 >"$work/log" 2>&1 || fail "the first run failed"
[[ $(cat "$ckpt/latest") == step-00000002.h5 ]] || fail "latest does not name step 2"
# Nearly full: room for what is there and a few kB more, far less than a checkpoint.
used_kb=$(du -sk "$mnt" | cut -f1)
mount -o remount,size=$((used_kb + 16))k "$mnt" || fail "cannot shrink the tmpfs"

# check_kept CAUSE: the job's log names the failed file and CAUSE once per rank, and the
# folder is as the first run left it.
check_kept() {
  [[ $(grep -c "step-00000004.h5.*$1" "$work/log") -ge 2 ]] || fail "not every rank named the file and '$1'"
  [[ $(cat "$ckpt/latest") == step-00000002.h5 ]] || fail "latest changed"
  "$bin/triad-ckpt" verify "$ckpt" >/dev/null || fail "the previous checkpoint does not verify"
  if compgen -G "$ckpt/*.tmp" >/dev/null; then fail "a temporary file is left"; fi
  [[ ! -e $ckpt/step-00000004.h5 ]] || fail "a partial checkpoint is left"
}

for cause in "No space left on device" "Read-only file system"; do
  [[ $cause == Read-only* ]] && { mount -o remount,ro,size=64m "$mnt" || fail "cannot make the tmpfs read-only"; }
  if "${train[@]}" --steps 4 --set checkpoint.on_error=stop >"$work/log" 2>&1; then fail "stop: the job succeeded"; fi
  check_kept "$cause"
  "${train[@]}" --steps 5 --set checkpoint.on_error=continue >"$work/log" 2>&1 || fail "continue: the job failed"
  grep -q "checkpoint failed, training continues" "$work/log" || fail "continue: the failure was not logged"
  check_kept "$cause"
  echo "$cause: stop exits non-zero naming the file on every rank, continue trains to the end; latest kept"
done
