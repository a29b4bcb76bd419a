#!/usr/bin/env bash
# The Hugging Face round trip on a 3D grid: the tiny GPT-2 that transformers saved
# (tests/data/hf_roundtrip/gpt2) is imported by its folder, trained 20 steps on pp 2 x dp 2 x
# tp 2 (8 ranks) on english.txt encoded with its own tokenizer, and exported; transformers
# loads the exported folder (AutoModelForCausalLM, AutoTokenizer) and its loss on the
# validation window equals the validation loss triad-train reports after its last step within
# 1e-5. The validation split is exactly seq_len + 1 tokens, so that loss is of one known window
# (hf_roundtrip_reference.py --window-loss). Needs python3 with torch and transformers: where
# they are not installed it says so and skips (exit 77).
#   check_hf_roundtrip.sh BIN_DIR REPO_DIR
set -euo pipefail
bin=$(cd "$1" && pwd) repo=$(cd "$2" && pwd)
python=${TRIAD_PYTHON:-python3}
if ! "$python" -c "import torch, transformers" 2>/dev/null; then
  echo "SKIPPED: $python has no torch and transformers (pip install torch transformers; TRIAD_PYTHON picks a python)"
  exit 77
fi
source "$(dirname "$0")/app_steps.sh"

run import "$bin/triad-ckpt" import --from "$repo/tests/data/hf_roundtrip/gpt2" --out "$work/ckpt"
run encode "$bin/triad-data" encode --tokenizer "$work/ckpt" --corpus "$repo/tests/data/io/english.txt" \
  --out "$work/tokens.bin"
seq_len=64
count=$("$python" -c 'import struct, sys; print(struct.unpack_from("<Q", open(sys.argv[1], "rb").read(), 20)[0])' \
  "$work/tokens.bin")
val_fraction=$("$python" -c "print(repr(($seq_len + 1) / $count))")
cat >"$work/config.json" <<EOF
{
  "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "d_model": 16, "seq_len": $seq_len, "vocab_size": 512,
            "tensor_parallel": 2},
  "data": {"corpus": "$work/tokens.bin", "tokenizer": "$work/ckpt/tokenizer.json", "val_fraction": $val_fraction},
  "pipeline": {"stages": 2},
  "train_batch_size": 8,
  "train_micro_batch_size_per_gpu": 2,
  "steps": 20,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95], "weight_decay": 0.0}},
  "scheduler": {"type": "constant"},
  "gradient_clipping": 1.0,
  "seed": 7,
  "eval_interval": 0,
  "eval_iters": 1,
  "log_interval": 1000
}
EOF
run train mpirun -np 8 --oversubscribe --bind-to none "$bin/triad-train" --config "$work/config.json" \
  --resume "$work/ckpt" --set output_dir="$work/trained" --metrics "$work/metrics.jsonl"
grep -q "resumed from $work/ckpt/step-00000000.h5 at step 0" "$work/train" || { cat "$work/train"; fail "resume"; }
run export "$bin/triad-ckpt" export "$work/trained/model.h5" --format safetensors --out "$work/hf"
[[ -e $work/hf/config.json && -e $work/hf/tokenizer.json ]] || { ls "$work/hf"; fail "the export lacks its config or tokenizer"; }
triad=$("$python" -c 'import json, sys; print(repr(json.loads(open(sys.argv[1]).readlines()[-1])["val_loss"]))' \
  "$work/metrics.jsonl")
run hf_loss "$python" "$repo/tests/reference/hf_roundtrip_reference.py" --window-loss "$work/hf" "$work/tokens.bin"
theirs=$(tail -n 1 "$work/hf_loss")
run hf_check "$python" "$repo/tests/reference/hf_roundtrip_reference.py" --trained --check gpt2 "$work/hf"
"$python" - "$triad" "$theirs" <<'PY' || fail "triad's loss and transformers' differ"
import sys
triad, theirs = float(sys.argv[1]), float(sys.argv[2])
print(f"validation loss after 20 steps on pp 2 x dp 2 x tp 2: triad {triad:.8f}, transformers {theirs:.8f}")
sys.exit(0 if abs(triad - theirs) <= 1e-5 else 1)
PY
echo "OK: imported, trained on pp 2 x dp 2 x tp 2, exported; transformers loads it and gives triad's loss"
