#!/usr/bin/env bash
# ZeRO-Infinity trains, saves and resumes a model larger than memory exactly: a GPT of about
# 413M parameters, whose model states (f32 parameters, gradients and Adam's two moments: 16
# bytes a parameter, 6.6 GB) are more than twice a 3 GiB memory limit, trains STEPS steps at
# ZeRO-3 with its parameters and optimizer state offloaded to NVMe (swap files in a scratch
# folder) inside a memory cgroup of that limit, saving a checkpoint after step STEPS - 1 and
# at the end, and the trained model (model.h5) at the end, each streamed from the swap files
# (Note [Streamed checkpoints]); then a second run inside the limit resumes from the
# checkpoint of step STEPS - 1 and takes the last step. The losses of both, the resumed one
# included, must equal those of the same run without offload and without a limit within
# 1e-6, the model.h5 must hold the same tensors as the one that run saves (the same
# checksums), and the cgroup's recorded peak over both runs must stay under the limit. Needs
# root and the cgroup memory controller (v1 or v2); skipped (77) without them. About 20 GB
# of disk in the scratch folder at most. Prints one JSON line of figures last.
#   larger_than_memory.sh BIN_DIR [STEPS]
bin=$1 steps=${2:-3}
source "$(dirname "$0")/mpi_job.sh"
export OMP_NUM_THREADS=2
limit=$((3 << 30))

# The cgroup: v1's memory hierarchy, or v2's unified one with the memory controller.
name=triad-larger-than-memory-$$
if [[ -w /sys/fs/cgroup/memory ]]; then
  group=/sys/fs/cgroup/memory/$name limit_file=memory.limit_in_bytes peak_file=memory.max_usage_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null && [[ -w /sys/fs/cgroup ]]; then
  group=/sys/fs/cgroup/$name limit_file=memory.max peak_file=memory.peak
else
  echo "skipped: no writable cgroup memory controller (needs root and cgroup v1's memory hierarchy or v2's memory controller)"
  exit 77
fi
mkdir "$group" 2>/dev/null || {
  echo "skipped: cannot make a cgroup under ${group%/*}"
  exit 77
}
cleanup_group() {
  cleanup
  rmdir "$group" 2>/dev/null || true
}
trap cleanup_group EXIT
echo "$limit" >"$group/$limit_file"
[[ -r $group/$peak_file ]] || {
  echo "skipped: this kernel's cgroup records no peak ($peak_file)"
  exit 77
}

make_corpus "$bin"
cat >"$work/config.json" <<EOF
{
  "model": {"arch": "gpt2", "n_layer": 21, "n_head": 20, "d_model": 1280, "seq_len": 64, "vocab_size": 300,
            "dropout": 0.0},
  "data": {"corpus": "$work/tokens.bin", "tokenizer": "$work/tok.json", "val_fraction": 0.05},
  "train_batch_size": 1,
  "train_micro_batch_size_per_gpu": 1,
  "steps": $steps,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "gradient_clipping": 1.0,
  "seed": 1234,
  "eval_interval": 0,
  "eval_iters": 1,
  "log_interval": 1,
  "device": "cpu",
  "zero_optimization": {"stage": 3}
}
EOF

# The run in memory, without a limit.
t0=$SECONDS
"$bin/triad-train" --config "$work/config.json" --metrics "$work/memory.jsonl" --set output_dir="$work/memory" \
  >"$work/log" 2>&1 || fail "the run without offload failed"
memory_s=$((SECONDS - t0))
params=$(sed -n 's/^model: [a-z0-9]*, \([0-9.]*\)M parameters.*/\1/p' "$work/log")

# offloaded TAG [options]: the same run offloaded, inside the cgroup (log $work/TAG.log).
offloaded() {
  local tag=$1
  shift
  (
    echo $BASHPID >"$group/cgroup.procs"
    exec "$bin/triad-train" --config "$work/config.json" --metrics "$work/$tag.jsonl" \
      --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path="$work/nvme" \
      --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path="$work/nvme" \
      --set zero_optimization.offload_param.buffer_count=4 --set zero_optimization.sub_group_size=5000000 "$@"
  ) >"$work/$tag.log" 2>&1 || {
    local rc=$?
    cp "$work/$tag.log" "$work/log"
    fail "the offloaded run ($tag) under the $limit-byte limit failed (exit $rc; 137: killed for memory)"
  }
  [[ -z $(ls -A "$work/nvme") ]] || fail "swap files left in nvme_path: $(ls "$work/nvme")"
}
mkdir "$work/nvme"
t0=$SECONDS
offloaded offload --set checkpoint.dir="$work/ckpt" --set checkpoint.every=$((steps - 1)) --set output_dir="$work/offload"
offload_s=$((SECONDS - t0))
saved=$work/ckpt/$(printf 'step-%08d.h5' $((steps - 1)))
[[ -f $saved && -f $work/offload/model.h5 ]] || fail "no checkpoint $saved or model.h5: $(ls "$work/ckpt" "$work/offload")"
rm -f "$work/ckpt/$(printf 'step-%08d.h5' "$steps")"  # its disk space
t0=$SECONDS
offloaded resumed --resume "$saved"
resumed_s=$((SECONDS - t0))
peak=$(cat "$group/$peak_file")
# The two model.h5 files' tensors, each with its checksum, as triad-ckpt lists them.
"$bin/triad-ckpt" inspect "$work/memory/model.h5" | grep '/model/' >"$work/memory.sums" || fail "inspect model.h5"
"$bin/triad-ckpt" inspect "$work/offload/model.h5" | grep '/model/' >"$work/offload.sums" || fail "inspect model.h5"
same_model=$(cmp -s "$work/memory.sums" "$work/offload.sums" && echo 1 || echo 0)
times=$(sed -n 's/.*saved \(.*\) in \([0-9.]*\) s$/\1 \2/p' "$work/offload.log" | tr '\n' ' ')
load_s=$(sed -n 's/^resumed from .* in \([0-9.]*\) s$/\1/p' "$work/resumed.log")

python3 - "$work/memory.jsonl" "$work/offload.jsonl" "$work/resumed.jsonl" "$params" "$limit" "$peak" "$memory_s" \
  "$offload_s" "$resumed_s" "$steps" "$same_model" "$load_s" $times <<'EOF'
import json, sys
memory, offload, resumed, params, limit, peak, memory_s, offload_s, resumed_s, steps, same_model, load_s = sys.argv[1:13]
saves = dict(zip(sys.argv[13::2], map(float, sys.argv[14::2])))  # path: seconds
losses = [[json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in (memory, offload, resumed)]
params, limit, peak, steps = float(params) * 1e6, int(limit), int(peak), int(steps)
states = 16 * params
ok = True
def check(cond, what):
    global ok
    print(("ok: " if cond else "FAIL: ") + what)
    ok = ok and cond
check(len(losses[0]) == steps and len(losses[1]) == steps and len(losses[2]) == 1,
      f"{steps}, {steps} and 1 losses: {losses}")
diff = max(abs(a - b) for a, b in zip(*losses[:2])) if losses[0] else float("inf")
check(diff <= 1e-6, f"offloaded losses equal the in-memory run's within 1e-6 (max difference {diff:.3g})")
resumed_diff = abs(losses[2][0] - losses[0][-1]) if losses[0] and losses[2] else float("inf")
check(resumed_diff <= 1e-6, f"the resumed run's step {steps} equals the in-memory run's within 1e-6 ({resumed_diff:.3g})")
check(same_model == "1", "the offloaded run's model.h5 holds the in-memory run's tensors (same checksums)")
check(len(saves) == 3, f"two checkpoints and model.h5 saved: {saves}")
check(states >= 2 * limit, f"model states {states / 1e9:.2f} GB are at least twice the limit {limit / 2**30:.0f} GiB")
check(peak < limit, f"the cgroup's peak {peak / 2**30:.3f} GiB over both offloaded runs stays under the limit")
print(json.dumps({"check": "larger_than_memory", "params": params, "model_state_bytes": states,
                  "limit_bytes": limit, "peak_bytes": peak, "steps": steps, "losses": losses[1],
                  "resumed_losses": losses[2], "max_loss_difference": max(diff, resumed_diff),
                  "save_s": saves, "load_s": float(load_s or "nan"), "in_memory_s": int(memory_s),
                  "offloaded_s": int(offload_s), "resumed_s": int(resumed_s)}))
sys.exit(0 if ok else 1)
EOF
