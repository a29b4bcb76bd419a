#!/usr/bin/env bash
# check_collectives.sh COMMAND...: runs a `triad-bench collectives` sweep (COMMAND, under
# mpirun) and passes when it exits 0 within 240 s and the JSON object on its last line has
# rows for all six ops, each checked, with 0 wrong elements in triad's and the raw MPI
# results (total_wrong and total_raw_wrong 0).
set -u
output=$(timeout 240 "$@")  # stdout only: the table and, last, the JSON line
status=$?
echo "$output" | grep -v '^{'
if [[ $status -eq 124 ]]; then echo "the sweep hung (killed after 240s)"; exit 1; fi
if [[ $status -ne 0 ]]; then echo "the sweep exited with status $status"; exit 1; fi
tail -n 1 <<<"$output" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
rows, s = j["rows"], j["summary"]
ops = {r["op"] for r in rows}
expected = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "sendrecv"}
problems = []
if ops != expected: problems.append("ops reported: %s, expected %s" % (sorted(ops), sorted(expected)))
bad = [r for r in rows if r["wrong"] != 0 or r["raw_wrong"] != 0]
if bad: problems.append("%d rows with wrong elements (or unchecked), first: %s" % (len(bad), bad[0]))
if s["total_wrong"] != 0 or s["total_raw_wrong"] != 0: problems.append("summary: %s" % s)
if problems: sys.exit("FAILED: " + "; ".join(problems))
print("OK: %d rows, 0 wrong" % len(rows))
'
