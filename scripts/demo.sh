#!/usr/bin/env bash
# The README's main job: learn a tokenizer on the fortunes corpus (a Debian package of
# plain English), tokenize it, train a small GPT for a few minutes, and sample from it.
# Steps already done (tokenizer, tokens) are reused; training always runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
out=build/demo
corpus=/usr/share/games/fortunes
mkdir -p "$out"

if [[ ! -s $out/tokenizer.json ]]; then
  "$bin/triad-data" tokenizer --corpus "$corpus" --separator % --vocab-size 2048 --out "$out/tokenizer.json"
fi
if [[ ! -s $out/tokens.bin ]]; then
  "$bin/triad-data" encode --tokenizer "$out/tokenizer.json" --corpus "$corpus" --separator % --out "$out/tokens.bin"
fi
"$bin/triad-train" --config configs/demo.json --metrics "$out/metrics.jsonl" "$@"
echo
echo "--- samples from the trained model ---"
for seed in 1 2 3; do
  "$bin/triad-generate" --checkpoint "$out/model/model.h5" --prompt "The meaning of life is" --max-new-tokens 80 --seed "$seed"
  echo "%"
done
