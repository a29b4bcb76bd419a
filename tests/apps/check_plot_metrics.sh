#!/usr/bin/env bash
# check_plot_metrics.sh: scripts/plot-metrics turns a metrics file (with validation losses
# and a resumed run's repeated steps) into a 1200x800 PNG, and refuses a file without
# metrics with a message naming it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
plot=$here/../../scripts/plot-metrics
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp/metrics.jsonl" <<'PY'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for step in list(range(1, 41)) + list(range(31, 61)):  # steps 31-40 written twice (a resume)
        line = {"step": step, "loss": 7 * math.exp(-step / 30) + 1, "lr": 1e-3, "grad_norm": 1.0,
                "step_ms": 100.0, "tokens_per_s": 1000.0 + step}
        if step % 20 == 0:
            line["val_loss"] = line["loss"] + 0.1
        f.write(json.dumps(line) + "\n")
PY
"$plot" "$tmp/metrics.jsonl" "$tmp/metrics.png"
"$here/check_png.py" "$tmp/metrics.png" 1200 800

echo '{"bench": "step"}' >"$tmp/other.jsonl"
if "$plot" "$tmp/other.jsonl" "$tmp/other.png" 2>"$tmp/err"; then
  echo "FAILED: plot-metrics accepted a file without metrics"
  exit 1
fi
grep -q "other.jsonl has no lines with a step and a loss" "$tmp/err" || { echo "FAILED: message: $(cat "$tmp/err")"; exit 1; }
echo "OK: a file without metrics is refused: $(cat "$tmp/err")"
