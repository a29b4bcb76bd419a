#!/usr/bin/env bash
# check_failing_ranks.sh FAILING_RANKS MPIEXEC: the ends of failing jobs (Note [A failing
# rank's end] in parallel/runtime.h), on 4 ranks.
# - Every rank meets an error, the last 0.9 s after the first: every rank's message is
#   printed before the job ends (aborting from the first rank would kill the others first).
# - One rank fails while the others wait for it in a barrier: the job still ends, non-zero,
#   within the grace period and a margin, with that rank's message.
set -u
program=$1 mpiexec=$2
run() { timeout 60 "$mpiexec" -np 4 --oversubscribe --bind-to none "$program" "$@" 2>&1; }

output=$(run staggered)
status=$?
if [[ $status -eq 0 || $status -eq 124 ]]; then echo "staggered: exit $status (expected a failure, no hang):"; echo "$output"; exit 1; fi
for r in 0 1 2 3; do
  if ! grep -q "rank $r: error: rank $r failed" <<<"$output"; then
    echo "staggered: rank $r's error is missing:"; echo "$output"; exit 1
  fi
done

start=$(date +%s)
output=$(run alone)
status=$?
seconds=$(($(date +%s) - start))
if [[ $status -eq 0 || $status -eq 124 ]]; then echo "alone: exit $status (expected a failure, no hang):"; echo "$output"; exit 1; fi
if ! grep -q "rank 1: error: rank 1 failed alone" <<<"$output"; then echo "alone: rank 1's error is missing:"; echo "$output"; exit 1; fi
if ((seconds > 20)); then echo "alone: the job took ${seconds} s to end"; exit 1; fi
echo "every failing rank printed its error; a lone failure ended the job in ${seconds} s"
