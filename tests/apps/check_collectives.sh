#!/usr/bin/env bash
# check_collectives.sh COMM RANKS COMMAND...: runs a `triad-bench collectives` sweep (COMMAND,
# under mpirun) and passes when it exits 0 within 240 s and the JSON object on its last line
# is the sweep's: comm COMM on RANKS ranks, its raw side named for COMM's default (mpi:
# nonblocking, nccl: nccl), checked, rows for all six ops, each with positive
# times for triad's and the raw call and 0 wrong elements in both results (total_wrong and
# total_raw_wrong 0).
set -u
comm=$1 ranks=$2
shift 2
output=$(timeout 240 "$@")  # stdout only: the table and, last, the JSON line
status=$?
echo "$output" | grep -v '^{'
if [[ $status -eq 124 ]]; then echo "the sweep hung (killed after 240s)"; exit 1; fi
if [[ $status -ne 0 ]]; then echo "the sweep exited with status $status"; exit 1; fi
tail -n 1 <<<"$output" | python3 -c '
import json, sys
comm, ranks = sys.argv[1], int(sys.argv[2])
j = json.loads(sys.stdin.read())
rows, s = j["rows"], j["summary"]
problems = []
raw = {"mpi": "nonblocking", "nccl": "nccl"}[comm]
for key, want in (("bench", "collectives"), ("comm", comm), ("raw", raw), ("ranks", ranks), ("check", True)):
    if j[key] != want: problems.append("%s is %r, expected %r" % (key, j[key], want))
ops = {r["op"] for r in rows}
expected = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "sendrecv"}
if ops != expected: problems.append("ops reported: %s, expected %s" % (sorted(ops), sorted(expected)))
bad = [r for r in rows if r["wrong"] != 0 or r["raw_wrong"] != 0]
if bad: problems.append("%d rows with wrong elements (or unchecked), first: %s" % (len(bad), bad[0]))
untimed = [r for r in rows if not (r["time_us"] > 0 and r["raw_time_us"] > 0)]
if untimed: problems.append("%d rows without positive times, first: %s" % (len(untimed), untimed[0]))
if s["total_wrong"] != 0 or s["total_raw_wrong"] != 0: problems.append("summary: %s" % s)
if problems: sys.exit("FAILED: " + "; ".join(problems))
print("OK: %s on %d ranks, %d rows, 0 wrong" % (comm, ranks, len(rows)))
' "$comm" "$ranks"
