#!/usr/bin/env bash
# check_speed_step.sh: the GPU kit's speed_step.py and targets.py on stub programs (no GPU, no
# PyTorch needed). A stub triad-bench answers batch 16 at 100 ms/step (MFU 0.5) and batch 32
# at 400 ms (MFU 0.25), and runs out of device memory at batch 64 with and without
# --checkpointing; a stub Python with "torch" answers the probe and prints the peer's JSON
# (eager 150 ms at 16, compile 80 ms at 16, compile out of memory at 32, batch 64 not run).
# Passes when the table holds the ratios these imply (triad/eager 1.50, triad/compile 0.80
# at batch 16), "did not fit" at batch 64, the targets' verdicts (MFU 50% PASS, best
# triad over best compile 163840/204800 = 0.80 MISS), the exit status is 0, and
# targets.py reads them back from results.json.
set -u
here=$(cd "$(dirname "$0")" && pwd)
kitd=$here/../../scripts/gpu-kit.d
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kit/bin" "$work/out"
cp "$kitd/speed_step.py" "$kitd/targets.py" "$work/kit/"
cat >"$work/kit/bin/triad-bench" <<'STUB'
#!/usr/bin/env bash
batch=$5
case $batch in
  16) ms=100 mfu=0.5 ;;
  32) ms=400 mfu=0.25 ;;
  *) echo "rank 0: error: out of memory on cuda:0: allocating 1 bytes" >&2; exit 1 ;;
esac
echo "{\"bench\":\"step\",\"batch\":$batch,\"device_name\":\"Stub H200\",\"step_ms_median\":$ms,\"tokens_per_s\":$((batch * 1024 * 1000 / ms)),\"mfu\":$mfu,\"peak_tflops\":989}"
STUB
cat >"$work/kit/torch_gpt2_step.py" <<'STUB'
import json
ok = lambda mode, ms: {"mode": mode, "batch": 16, "status": "ok", "step_ms_median": ms, "tokens_per_s": 16384000 / ms, "mfu": 0.3}
print(json.dumps({"torch": "stub", "device_name": "Stub H200", "results": [ok("eager", 150), ok("compile", 80),
      {"mode": "eager", "batch": 32, "status": "ok", "tokens_per_s": 100000.0, "step_ms_median": 327.68},
      {"mode": "compile", "batch": 32, "status": "did not fit (out of device memory)", "tokens_per_s": None}]}))
STUB
cat >"$work/python" <<STUB
#!/usr/bin/env bash
if [[ \$1 == -c ]]; then echo "stub True"; exit 0; fi
exec python3 "\$@"
STUB
chmod +x "$work/kit/bin/triad-bench" "$work/python"
output=$(TORCH_PYTHON=$work/python python3 "$work/kit/speed_step.py" --kit "$work/kit" --out "$work/out" --budget 120)
status=$?
echo "$output"
fail() { echo "FAILED: $1"; exit 1; }
((status == 0)) || fail "speed_step.py exited with $status"
grep -qF '| 16 | 100.0 | 163840 | 50.0% PASS | 109227 | 204800 | 1.50 | 0.80 MISS | - |' <<<"$output" || fail "batch 16's row"
grep -qF '| 32 | 400.0 | 81920 | 25.0% MISS | 100000 | - | 0.82 | - | compile: did not fit (out of device memory) |' \
  <<<"$output" || fail "batch 32's row"
grep -qF '| 64 | - | - | - | - | - | - | - | triad: did not fit (out of device memory, with checkpointing too); eager: not run; compile: not run |' \
  <<<"$output" || fail "batch 64's row"
grep -qF "triad's best MFU 50.0% (target >= 45% at one batch): PASS; triad's best tokens/s over torch.compile's best 0.80 (target > 1): MISS" \
  <<<"$output" || fail "the targets line"
[[ $(grep -c -- '--checkpointing' "$work/out/speed.log") == 1 ]] || fail "batch 64 was not tried again with --checkpointing"
tail -n 1 <<<"$output" >"$work/speed.json"
python3 - "$work/out" "$work/speed.json" <<'PY' || exit 1
import json, sys
out = sys.argv[1]
json.dump({"device": "Stub H200", "steps": {"speed_step": {"json": json.load(open(sys.argv[2]))},
           "bench_attention": {"json": {"fwd_tflops": 251.0, "bwd_tflops": 199.0}}}}, open(out + "/results.json", "w"))
PY
: >"$work/out/summary.md"
python3 "$work/kit/targets.py" "$work/out/results.json" "$work/out/summary.md" >/dev/null || fail "targets.py exited with $?"
cat "$work/out/summary.md"
for row in "| triad step MFU >= 45% at batch 16, 32 or 64 (GPT-2 124M, bf16) | 50.0% | PASS |" \
  "| triad step tokens/s over torch.compile's (best batch each) > 1 | 0.80 | MISS |" \
  "| attention forward >= 250 TFLOP/s (bf16, hs 64, T 1024, causal) | 251.0 TFLOP/s | PASS |" \
  "| attention backward >= 200 TFLOP/s (bf16, hs 64, T 1024, causal) | 199.0 TFLOP/s | MISS |" \
  "| generation >= 50k tokens/s (RLHF demo actor, batch 32) | - | not measured |" "## Targets on Stub H200"; do
  grep -qF -- "$row" "$work/out/summary.md" || fail "summary.md lacks: $row"
done
echo "speed_step and targets: ok"
