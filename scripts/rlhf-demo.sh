#!/usr/bin/env bash
# `make rlhf-demo`: DeepSpeed-Chat's three steps, and GRPO and DPO beside PPO, on the
# embedded fortunes dataset (configs/rlhf-demo.json). A small GPT is pretrained on the
# fortunes corpus, fine-tuned on the SFT split (prompt: a fortune's first four words;
# answer: the rest), a reward model learns to prefer the real ending over a shuffled,
# partly replaced one, and PPO, GRPO and DPO each tune the SFT model towards it. Every
# step's metrics go to build/rlhf/<step>.jsonl; the summary at the end reads them, its last
# line one JSON object with the figures (tests/apps/check_rlhf_demo.sh holds them to bounds).
#
#   TRIAD_BIN   the programs' folder (default build/bin)
#   RLHF_WORK   the folder the configs' paths (build/rlhf/...) start from (default the repository)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRIAD_BIN:-$repo/build/bin}
cd "${RLHF_WORK:-$repo}"
out=build/rlhf
corpus=/usr/share/games/fortunes
mkdir -p "$out"

if [[ ! -s $out/tokenizer.json ]]; then
  "$bin/triad-data" tokenizer --corpus "$corpus" --separator % --vocab-size 2048 --out "$out/tokenizer.json"
fi
if [[ ! -s $out/tokens.bin ]]; then
  "$bin/triad-data" encode --tokenizer "$out/tokenizer.json" --corpus "$corpus" --separator % --out "$out/tokens.bin"
fi
if [[ ! -s $out/pairs.jsonl ]]; then
  "$bin/triad-data" pairs --corpus "$corpus" --separator % --out "$out/pairs.jsonl"
fi

step() {  # step NAME COMMAND...: runs a step, its metrics to $out/NAME.jsonl
  local name=$1
  shift
  echo
  echo "=== $name ==="
  "$@" --metrics "$out/$name.jsonl"
}
step pretrain "$bin/triad-train" --config "$repo/configs/rlhf-pretrain.json"
for s in sft reward ppo grpo dpo; do
  step "$s" "$bin/triad-rlhf" "$s" --config "$repo/configs/rlhf-demo.json"
done

echo
echo "--- the SFT model, then the PPO actor, continuing \"The meaning of life\" ---"
for model in "$out/sft/model.h5" "$out/ppo/actor.h5"; do
  "$bin/triad-generate" --checkpoint "$model" --prompt "The meaning of life" --max-new-tokens 40 --seed 1
  echo "%"
done
echo
echo "=== summary ==="
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def rows(name):
    return [json.loads(line) for line in open(f"{out}/{name}.jsonl")]
def mean(xs):
    return sum(xs) / len(xs)
reward = [r for r in rows("reward") if "val_accuracy" in r]
dpo = [r for r in rows("dpo") if "val_margin" in r]
figures = {"reward_val_accuracy": reward[-1]["val_accuracy"], "dpo_val_margin": dpo[-1]["val_margin"],
           "dpo_val_accuracy": dpo[-1]["val_accuracy"]}
print(f"reward model: held-out accuracy {figures['reward_val_accuracy']:.3f}")
for name in ("ppo", "grpo"):
    r = rows(name)
    k = max(1, len(r) // 5)
    first, last, kl = (mean([x["reward"] for x in r[:k]]), mean([x["reward"] for x in r[-k:]]),
                       mean([x["kl"] for x in r[-k:]]))
    chosen = mean([x["chosen_reward"] for x in r[-k:]])
    figures.update({f"{name}_reward_first": first, f"{name}_reward_last": last, f"{name}_kl_last": kl,
                    f"{name}_chosen_reward_last": chosen})
    print(f"{name}: mean reward of fresh samples {first:.3f} over the first {k} steps, {last:.3f} over the last {k} "
          f"(the real answers to the same prompts: {chosen:.3f}, {100 * (last / chosen - 1):+.1f}%); "
          f"KL to the reference {kl:.3f}")
print(f"dpo: held-out margin {figures['dpo_val_margin']:.4f} (0 at the start), accuracy {figures['dpo_val_accuracy']:.3f}")
print(json.dumps(figures))
PY
