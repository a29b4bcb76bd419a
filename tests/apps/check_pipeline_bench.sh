#!/usr/bin/env bash
# check_pipeline_bench.sh TRIAD_BENCH ARGS...: runs `TRIAD_BENCH pipeline ARGS... --out DIR`
# (a fresh folder) with --stages 2 --schedules gpipe,1f1b,zb_h1, and passes when it exits 0
# within 240 s, DIR/pipeline.png is a 1200x800 PNG, pipeline.csv and the JSON object on the
# last line hold every run, and each run's figures are what its schedule implies: peak live
# micro-batches per stage (GPipe m; 1F1B min(p - r, m) on stage r; ZB-H1 that and at most
# min(p, m) with its pending weight gradients), the closed
# form of 1F1B and GPipe ((p - 1)/(m + p - 1), whatever the costs), a measured bubble in
# [0, 1), and activation bytes that grow with the live micro-batches (GPipe's stage 0 holds
# m of them, 1F1B's p). Timings themselves are not asserted: the machine may be busy.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bench=$1
shift
output=$(timeout 240 "$bench" pipeline --stages 2 --schedules gpipe,1f1b,zb_h1 "$@" --out "$out")
status=$?
echo "$output" | grep -v '^{'
[[ $status -eq 124 ]] && { echo "FAILED: the sweep hung (killed after 240 s)"; exit 1; }
[[ $status -ne 0 ]] && { echo "FAILED: the sweep exited with status $status"; exit 1; }
"$here/check_png.py" "$out/pipeline.png" 1200 800 || exit 1
tail -n 1 <<<"$output" | python3 -c '
import csv, json, sys
out = sys.argv[1]
j = json.loads(sys.stdin.read())
rows = j["rows"]
with open(out + "/pipeline.csv") as f:
    table = list(csv.DictReader(f))
problems = []
if j.get("bench") != "pipeline": problems.append("the JSON line is not from triad-bench pipeline")
if len(table) != len(rows) or not rows: problems.append("pipeline.csv has %d rows, the JSON %d" % (len(table), len(rows)))
act = {}
for r in rows:
    p, m, s = r["stages"], r["micro_batches"], r["schedule"]
    name = "%s m=%d" % (s, m)
    for st in r["per_stage"]:
        # ZB-H1 also keeps up to r micro-batches awaiting their weight gradients on stage r.
        low = m if s == "gpipe" else min(p - st["stage"], m)
        high = min(p, m) if s == "zb_h1" else low
        if not low <= st["peak_live"] <= high:
            problems.append("%s stage %d: peak live %d, expected %d..%d" % (name, st["stage"], st["peak_live"], low, high))
    if s in ("gpipe", "1f1b") and abs(r["bubble_theory"] - (p - 1) / (m + p - 1)) > 1e-12:
        problems.append("%s: closed form %g, expected %g" % (name, r["bubble_theory"], (p - 1) / (m + p - 1)))
    if not 0 <= r["bubble"] < 1: problems.append("%s: measured bubble %g outside [0, 1)" % (name, r["bubble"]))
    act[(s, m)] = r["per_stage"][0]["peak_activation_bytes"]
for (s, m), a in act.items():
    if s == "gpipe" and m > 2 and ("1f1b", m) in act and not a > act[("1f1b", m)]:
        problems.append("gpipe m=%d holds %d activation bytes on stage 0, no more than 1f1b (%d)" % (m, a, act[("1f1b", m)]))
if problems: sys.exit("FAILED: " + "; ".join(problems))
print("OK: %d runs, pipeline.csv and a 1200x800 pipeline.png" % len(rows))
' "$out"
