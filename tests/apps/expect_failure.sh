#!/usr/bin/env bash
# expect_failure.sh SECONDS PATTERN COMMAND...: passes when COMMAND exits non-zero within
# SECONDS (no hang) and its output contains PATTERN (an extended regular expression).
set -u
seconds=$1 pattern=$2
shift 2
output=$(timeout "$seconds" "$@" 2>&1)
status=$?
if [[ $status -eq 0 ]]; then echo "expected a failure, the command succeeded:"; echo "$output"; exit 1; fi
if [[ $status -eq 124 ]]; then echo "the command hung (killed after ${seconds}s):"; echo "$output"; exit 1; fi
if ! grep -Eq -- "$pattern" <<<"$output"; then echo "exit $status, but the output lacks /$pattern/:"; echo "$output"; exit 1; fi
echo "exit $status with /$pattern/"
