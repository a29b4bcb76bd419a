#!/usr/bin/env bash
# triad-estimate on pipeline layouts of GPT-2 124M (configs/gpt2-124m.json: L 12, C 768, NH 12,
# T 1024, V 50257 padded to 50304, micro batch 16): the JSON last line's fields against values
# worked by hand, the schedules' bubbles, and errors that name what to give.
#   check_estimate.sh TRIAD_ESTIMATE CONFIG
set -uo pipefail
est=$1 config=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

run() {  # run NAME ARGS...: the JSON last line into $out/NAME.json
  local name=$1
  shift
  "$est" --config "$config" "$@" >"$out/$name.txt" 2>&1 || { cat "$out/$name.txt"; fail "$name exited $?"; }
  tail -n 1 "$out/$name.txt" >"$out/$name.json"
}

run pp4 --pp 4 --dp 2 --tp 1 --stage 1 --micro-batches 8 --schedule 1f1b
run pp4_time --pp 4 --dp 2 --tp 1 --stage 1 --micro-batches 8 --schedule 1f1b --time --flops 4e14
run interleaved --pp 2 --dp 1 --micro-batches 4 --schedule interleaved --virtual-stages 2
run zb --pp 4 --dp 1 --micro-batches 8 --schedule zb_h1
run from_config --dp 2 --set pipeline.stages=2 --set gradient_accumulation_steps=4
run plain --dp 1,8

python3 - "$out" <<'PY' || exit 1
import json, sys
out = sys.argv[1]
j = {n: json.load(open(f"{out}/{n}.json")) for n in ["pp4", "pp4_time", "interleaved", "zb", "from_config", "plain"]}
problems = []
def check(what, got, want, tol=0.0):
    if abs(got - want) > tol * abs(want):
        problems.append(f"{what}: got {got}, expected {want}")

B, T, C, NH, V = 16, 1024, 768, 12, 50304
BTC = B * T * C
block = 64 * BTC + 16 * B * T + 4 * B * NH * T      # Note [Activation bytes], t = 1, p = 4
resid = 4 * BTC
lay = j["pp4"]["layout"]
check("1F1B p 4 m 8 bubble (3/11)", lay["bubble"], 3 / 11, 1e-12)
if lay["bounds"] != [0, 1, 7, 13, 14]:  # by parameters: 39.4M | 6 x 7.1M | 6 x 7.1M | 38.6M
    problems.append(f"bounds {lay['bounds']}, expected [0, 1, 7, 13, 14]")
s = lay["stages"]
check("stage 0 params (wte + wpe)", s[0]["params"], V * C + 1024 * C)
check("stage 3 params (wte + ln_f)", s[3]["params"], V * C + 2 * C)
check("stage 1 params (6 blocks)", s[1]["params"], 6 * (12 * C * C + 13 * C))
for r in range(4):
    check(f"stage {r} live (min(p - r, m))", s[r]["peak_live_micro_batches"], 4 - r)
    # ZeRO stage 1 over dp 2: 2 + 2 bytes whole, 12 / 2 per parameter.
    check(f"stage {r} model states", s[r]["model_state_bytes"], s[r]["params"] * (4 + 6))
    saved = s[r]["activation_bytes_per_micro_batch"][0]["saved_bytes"]
    check(f"stage {r} activations = live x per micro-batch", s[r]["activation_bytes"], (4 - r) * saved)
    # The bound on undelivered sends: 8 activations forward (r < 3), 8 gradients back (r > 0).
    check(f"stage {r} p2p buffers", s[r]["p2p_buffer_bytes"], 8 * resid * ((r < 3) + (r > 0)))
check("stage 0 per micro-batch (its output)", s[0]["activation_bytes_per_micro_batch"][0]["saved_bytes"], resid)
check("stage 1 per micro-batch (6 blocks + output)", s[1]["activation_bytes_per_micro_batch"][0]["saved_bytes"],
      6 * block + resid)
# ln_f's input and statistics, the projection's input, and the fused loss's lse and count:
# no logits (Note [Fused head loss]).
check("stage 3 per micro-batch (head + loss)", s[3]["activation_bytes_per_micro_batch"][0]["saved_bytes"],
      2 * resid + 8 * B * T + 4 * B * T + 8)

t = j["pp4_time"]["time"]
check("--time closed-form bubble", t["bubble"], 3 / 11, 1e-12)
# Without p2p the pipeline is (m + p - 1)/m = 11/8 of the ideal; p2p only adds.
if not t["pipeline_ms"] >= t["ideal_ms"] * 11 / 8 * (1 - 1e-9):
    problems.append(f"pipeline {t['pipeline_ms']} ms below 11/8 of the ideal {t['ideal_ms']} ms")
if not t["pipeline_ms"] <= t["ideal_ms"] * 11 / 8 + 2 * 3 * 8 * t["p2p_ms"] * (1 + 1e-9):
    problems.append(f"pipeline {t['pipeline_ms']} ms above 11/8 of the ideal plus every hop's p2p")
check("p2p bytes (one activation)", t["p2p_bytes"], resid)
check("step = pipeline + dp exposed + tied all-reduce", t["step_ms"],
      t["pipeline_ms"] + t["dp_exposed_ms"] + t["tied_allreduce_ms"], 1e-12)
check("tokens per step (dp B T m)", t["tokens_per_step"], 2 * B * T * 8)

check("interleaved p 2 v 2 m 4 bubble (1/9)", j["interleaved"]["layout"]["bubble"], 1 / 9, 1e-12)
check("ZB-H1 p 4 m 8 bubble, F = I = W (3/27)", j["zb"]["layout"]["bubble"], 3 / 27, 1e-12)
zs = j["zb"]["layout"]["stages"]
for r in range(4):  # 1F1B's p - r micro-batches plus r pending weight-gradient passes
    mb = zs[r]["activation_bytes_per_micro_batch"][0]
    check(f"ZB-H1 stage {r} peak", zs[r]["activation_bytes"], (4 - r) * mb["saved_bytes"] + r * mb["deferred_bytes"])
fc = j["from_config"]["layout"]
if (fc["pp"], fc["dp"], fc["micro_batches"], fc["micro_batch"]) != (2, 2, 4, 16):
    problems.append(f"pipeline.stages from --set: got pp {fc['pp']} dp {fc['dp']} m {fc['micro_batches']} "
                    f"B {fc['micro_batch']}, expected 2 2 4 16")
if len(j["plain"].get("estimates", [])) != 8 or "layout" in j["plain"]:
    problems.append("--dp 1,8 without layout flags no longer prints the ZeRO table of 8 rows")
if problems:
    sys.exit("FAILED: " + "; ".join(problems))
print("OK: bubbles 3/11, 1/9, 3/27; per-stage parameters, states, activations and p2p buffers as worked by hand")
PY

# The offload columns of the ZeRO paper's example (Ψ 7.5e9, n 64, K 12): S = 117187500 elements
# per rank; ZeRO-Infinity (stage 3, both to nvme) keeps the states and the gradients' shard
# (f32) on NVMe and their buffers (larger than a shard by default) in host memory; the
# optimizer on cpu adds the host store's f32 gradient and 16-bit parameter buffers (6 S).
"$est" --params 7.5e9 --dp 64 | tail -n 1 >"$out/offload.json" || fail "offload estimate exited $?"
python3 - "$out/offload.json" <<'PY' || exit 1
import json, sys
rows = {(r["stage"], r["offload_optimizer"], r["offload_param"]): r for r in json.load(open(sys.argv[1]))["offload"]}
S = 117187500
want = {(2, "cpu", "none"): (15e9 + 2 * S, 18 * S, 0), (3, "nvme", "nvme"): (0, 18 * S, 18 * S),
        (3, "cpu", "cpu"): (2 * S, 20 * S, 0), (0, "none", "none"): (120e9, 0, 0)}
bad = [f"{k}: {rows[k]}" for k, (d, h, n) in want.items()
       if (rows[k]["device_bytes"], rows[k]["host_bytes"], rows[k]["nvme_bytes"]) != (d, h, n)]
if len(rows) != 12 or bad:
    sys.exit(f"FAILED: offload columns ({len(rows)} rows): " + "; ".join(bad))
print("OK: offload columns of the paper's example by closed form")
PY

# Partial offload (--offload-ratio 0.25): each choice with the optimizer on cpu gets a row with
# three quarters of its 12 S on the device and a quarter of the host store's 18 S on the host.
"$est" --params 7.5e9 --dp 64 --offload-ratio 0.25 | tail -n 1 >"$out/ratio.json" || fail "ratio estimate exited $?"
python3 - "$out/ratio.json" <<'PY' || exit 1
import json, sys
rows = {(r["stage"], r["offload_optimizer"], r["offload_param"], r["offload_ratio"]): r
        for r in json.load(open(sys.argv[1]))["offload"]}
S = 117187500
want = {(2, "cpu", "none", 0.25): (15e9 + 2 * S + 9 * S, 4.5 * S, 0), (2, "cpu", "none", 1): (15e9 + 2 * S, 18 * S, 0),
        (3, "cpu", "cpu", 0.25): (11 * S, 6.5 * S, 0), (1, "cpu", "none", 0.25): (30e9 + 9 * S, 4.5 * S, 0)}
bad = [f"{k}: {rows.get(k)}" for k, (d, h, n) in want.items()
       if k not in rows or (rows[k]["device_bytes"], rows[k]["host_bytes"], rows[k]["nvme_bytes"]) != (d, h, n)]
if len(rows) != 16 or bad:
    sys.exit(f"FAILED: offload columns with ratio 0.25 ({len(rows)} rows): " + "; ".join(bad))
print("OK: offload columns with --offload-ratio 0.25 by closed form")
PY

expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1 text
  shift
  if text=$("$est" "$@" 2>&1); then fail "triad-estimate $* succeeded"; fi
  grep -q -- "$pattern" <<<"$text" || fail "triad-estimate $*: '$text' lacks '$pattern'"
}
expect_error "Give --config FILE" --params 7.5e9 --dp 64 --pp 2
expect_error "to be a multiple of pipeline.stages" --config "$config" --dp 1 --pp 4 --micro-batches 6 \
  --schedule interleaved --virtual-stages 2
expect_error "one data-parallel size" --config "$config" --dp 1,2 --pp 2
expect_error "offload-ratio: must be a number in \[0, 1\], got 1.5" --params 7.5e9 --dp 64 --offload-ratio 1.5
echo "OK: errors name --config, the interleaving's multiple, the single --dp and --offload-ratio's range"
