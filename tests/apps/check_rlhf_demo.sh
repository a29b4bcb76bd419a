#!/usr/bin/env bash
# `make rlhf-demo` does what it claims (bounds below the measured figures): the reward model
# prefers the real fortune on at least 90% of held-out pairs; PPO and GRPO each raise the mean
# reward of fresh samples by at least 1.5 from the first fifth of their steps to the last
# (measured: +3.1 and +2.8) while the KL to the reference stays under 10 nats a sequence
# (measured: 4.6 and 4.2); DPO's held-out chosen-over-rejected margin ends above 0.3 (it
# starts at 0; measured: 1.08). The samples' score beside the real answers' is printed, not
# bounded: both policies end far above the real answers (+92% and +76%), over-optimising the
# reward model (docs/rlhf.md, "The demo"). About 4 minutes on two cores, so: slow.
#   check_rlhf_demo.sh BIN_DIR REPO_DIR
set -euo pipefail
bin=$1 repo=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
TRIAD_BIN=$bin RLHF_WORK=$work "$repo/scripts/rlhf-demo.sh" >"$work/demo.log" 2>&1 ||
  { echo "FAIL: scripts/rlhf-demo.sh"; tail -30 "$work/demo.log"; exit 1; }
sed -n '/=== summary ===/,$p' "$work/demo.log"
python3 - "$(tail -n 1 "$work/demo.log")" <<'PY'
import json, sys
f = json.loads(sys.argv[1])
checks = [("reward model held-out accuracy >= 0.9", f["reward_val_accuracy"] >= 0.9),
          ("DPO held-out margin > 0.3", f["dpo_val_margin"] > 0.3)]
for name in ("ppo", "grpo"):
    checks.append((f"{name} raises the mean reward by >= 1.5", f[f"{name}_reward_last"] - f[f"{name}_reward_first"] >= 1.5))
    checks.append((f"{name} KL to the reference < 10", f[f"{name}_kl_last"] < 10))
for what, ok in checks:
    print(("ok   " if ok else "FAIL ") + what)
sys.exit(0 if all(ok for _, ok in checks) else 1)
PY
