#!/usr/bin/env bash
# A Mixtral through triad-ckpt and back into transformers: the tiny MixtralForCausalLM that
# transformers saved (tests/data/hf_roundtrip/mixtral) is imported by its folder (a Llama with
# MoE blocks), sampled greedily by triad-generate (the reference's 32 tokens), and exported;
# transformers loads the exported folder as a MixtralForCausalLM with the reference's loss and
# greedy text (hf_roundtrip_reference.py --check mixtral). Needs python3 with torch and
# transformers: where they are not installed it says so and skips (exit 77).
#   check_mixtral_export.sh BIN_DIR REPO_DIR
set -euo pipefail
bin=$(cd "$1" && pwd) repo=$(cd "$2" && pwd)
python=${TRIAD_PYTHON:-python3}
if ! "$python" -c "import torch, transformers" 2>/dev/null; then
  echo "SKIPPED: $python has no torch and transformers (pip install torch transformers; TRIAD_PYTHON picks a python)"
  exit 77
fi
source "$(dirname "$0")/app_steps.sh"
data=$repo/tests/data/hf_roundtrip

run import "$bin/triad-ckpt" import --from "$data/mixtral" --out "$work/ckpt"
run inspect "$bin/triad-ckpt" inspect "$work/ckpt"
grep -q '^/model/blocks.1.moe.experts.3.down.weight  *(16, 24) ' "$work/inspect" || { cat "$work/inspect"; fail "no expert 3"; }
"$python" - "$data/reference.json" "$work/prompt" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1], encoding="utf-8"))["mixtral"]
open(sys.argv[2], "w", encoding="utf-8").write(ref["prompt"])
PY
"$bin/triad-generate" --checkpoint "$work/ckpt/step-00000000.h5" --prompt "$(cat "$work/prompt")" \
  --max-new-tokens 32 --temperature 0 --threads 1 >"$work/generated" 2>"$work/generate_errors" ||
  { cat "$work/generate_errors"; fail "triad-generate exited non-zero"; }
"$python" - "$data/reference.json" "$work/generated" <<'PY' || fail "triad-generate's text is not transformers'"
import json, sys
ref = json.load(open(sys.argv[1], encoding="utf-8"))["mixtral"]
got = open(sys.argv[2], encoding="utf-8").read()
if ref["text"] not in got:
    sys.exit(f"FAILED: triad-generate printed {got!r}; transformers generated {ref['text']!r}")
print(f"OK: triad-generate continues {ref['prompt']!r} with transformers' {ref['text']!r}")
PY
run export "$bin/triad-ckpt" export "$work/ckpt" --format safetensors --out "$work/hf"
grep -q '"architectures": \[' "$work/hf/config.json" && grep -q '"MixtralForCausalLM"' "$work/hf/config.json" ||
  { cat "$work/hf/config.json"; fail "the export is not a MixtralForCausalLM"; }
run check "$python" "$repo/tests/reference/hf_roundtrip_reference.py" --check mixtral "$work/hf"
grep -q "MixtralForCausalLM" "$work/check" || { cat "$work/check"; fail "transformers did not load a MixtralForCausalLM"; }
cat "$work/check"
echo "OK: a transformers Mixtral imported, sampled as transformers samples it, exported, and loaded by transformers"
