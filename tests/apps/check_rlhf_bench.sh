#!/usr/bin/env bash
# check_rlhf_bench.sh TRIAD_BENCH: a small `triad-bench rlhf` sweep (1 and 2 ranks, ZeRO 0
# and 3) exits 0 within 240 s and its last line holds every run, each with its answers no
# longer than --answer, positive tokens/s, a time split that adds to 1, and the ratio it
# reports equal to its own actor and generation rates. Timings themselves are not asserted:
# the machine may be busy.
set -u
bench=$1
output=$(timeout 240 "$bench" rlhf --ranks 1,2 --stages 0,3 --batch 4 --prompt 6 --answer 5 --steps 1 --warmup 0 \
  --set model.n_layer=1 --set model.d_model=32 --set model.seq_len=16 --set model.vocab_size=300)
status=$?
echo "$output" | grep -v '^{'
[[ $status -eq 124 ]] && { echo "FAILED: the sweep hung (killed after 240 s)"; exit 1; }
[[ $status -ne 0 ]] && { echo "FAILED: the sweep exited with status $status"; exit 1; }
tail -n 1 <<<"$output" | python3 -c '
import json, math, sys
j = json.loads(sys.stdin.read())
runs = j["runs"]
problems = []
if sorted((r["ranks"], r["stage"]) for r in runs) != [(1, 0), (1, 3), (2, 0), (2, 3)]:
    problems.append("runs: %s" % [(r["ranks"], r["stage"]) for r in runs])
for r in runs:
    name = "ranks %d, stage %d" % (r["ranks"], r["stage"])
    if not 0 < r["response_length"] <= 5: problems.append("%s: response length %g" % (name, r["response_length"]))
    for k in ("generation_tokens_per_s", "ppo_training_tokens_per_s", "actor_training_tokens_per_s", "step_s"):
        if not (r[k] > 0 and math.isfinite(r[k])): problems.append("%s: %s %g" % (name, k, r[k]))
    split = r["generation_fraction"] + r["experience_fraction"] + r["training_fraction"]
    if abs(split - 1) > 1e-9: problems.append("%s: the split adds to %g" % (name, split))
    ratio = r["actor_training_tokens_per_s"] / r["generation_tokens_per_s"]
    if abs(r["generation_vs_training_per_token"] - ratio) > 1e-9 * ratio: problems.append("%s: ratio" % name)
worst = max(r["generation_vs_training_per_token"] for r in runs)
if j["generation_vs_training_per_token_max"] != worst or j["target_met"] != (worst <= j["target"]):
    problems.append("summary: max %g, target_met %s" % (j["generation_vs_training_per_token_max"], j["target_met"]))
for p in problems: print("FAILED:", p)
sys.exit(1 if problems else 0)
'
