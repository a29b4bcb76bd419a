#!/usr/bin/env bash
# triad-rlhf end to end on a tiny GPT and 600 fortune pairs: every step runs (SFT, reward
# model, PPO with the adaptive KL controller, ptx and the actor's EMA, GRPO, DPO), with a
# Llama, the reward model and DPO at tensor-parallel 2 and in two pipeline stages and PPO in
# two pipeline stages as in one process; a PPO run
# stopped at step 2 and resumed (in one process, and in two pipeline stages) ends on the
# uninterrupted run's metrics, actor and EMA; bad
# input (a row without "chosen", prompts all longer than the limit, sequence parallelism
# without tensor parallelism, a critic initialized from a reward model of another hidden
# size, under mpirun on 2 ranks)
# fails on every rank with an error that names the problem, and leaves what earlier runs
# saved untouched.
#   check_rlhf_steps.sh BIN_DIR
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
corpus=/usr/share/games/fortunes
cd "$work"
"$bin/triad-data" tokenizer --corpus "$corpus" --separator % --vocab-size 300 --out tok.json >/dev/null
"$bin/triad-data" pairs --corpus "$corpus" --separator % --out all.jsonl >/dev/null
head -n 600 all.jsonl >pairs.jsonl

cat >rlhf.json <<'EOF'
{
  "model": {"arch": "gpt2", "n_layer": 1, "n_head": 2, "d_model": 32, "seq_len": 48, "vocab_size": 300},
  "data": {"path": "pairs.jsonl", "tokenizer": "tok.json", "data_split": "2,4,4", "max_prompt_seq_len": 16,
           "max_seq_len": 40, "val_fraction": 0.1},
  "train_batch_size": 8,
  "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-4, "weight_decay": 0.0}},
  "seed": 7,
  "log_interval": 1,
  "sft": {"steps": 6, "output_dir": "sft"},
  "reward": {"init": "sft/model.h5", "steps": 6, "output_dir": "reward"},
  "dpo": {"init": "sft/model.h5", "steps": 4, "beta": 0.1, "output_dir": "dpo"},
  "ppo": {"reward_model": "reward/model.h5", "steps": 4, "max_answer_seq_len": 12, "kl_target": 2.0,
          "kl_horizon": 100, "unsup_coef": 0.5, "ppo_epochs": 2, "enable_ema": true,
          "actor": {"init": "sft/model.h5"}, "critic": {"init": "reward/model.h5"}, "output_dir": "ppo"},
  "grpo": {"reward_model": "reward/model.h5", "steps": 2, "max_answer_seq_len": 12, "group_size": 4,
           "actor": {"init": "sft/model.h5"}, "output_dir": "grpo"}
}
EOF

run() {  # run LOG COMMAND...: a step that must succeed
  local log=$1
  shift
  "$@" >"$log.log" 2>&1 || { echo "FAIL: $*"; tail -20 "$log.log"; exit 1; }
}
rlhf=("$bin/triad-rlhf")
for s in sft reward ppo grpo dpo; do
  run "$s" "${rlhf[@]}" "$s" --config rlhf.json --metrics "$s.jsonl"
done
for f in sft/model.h5 reward/model.h5 ppo/actor.h5 ppo/critic.h5 ppo/actor_ema.h5 grpo/actor.h5 dpo/model.h5; do
  [[ -s $f ]] || { echo "FAIL: $f was not saved"; exit 1; }
done
echo "ok   every step ran and saved its model"

# The reward model and DPO with their models split over a tensor-parallel pair of ranks, and
# in two pipeline stages, and PPO (adaptive KL, ptx, EMA) in two pipeline stages: the single
# process's losses, scores, margins and rewards at every step (more layouts:
# test_rl_training_mpi). Adam's eps is 1e-4 in this config so that gradients at rounding
# level, whose rounding differs with the layout, move their weights by lr·g/eps, not by lr.
mpi=(mpirun -np 2 --oversubscribe --bind-to none)
for layout in tp:model.tensor_parallel pp:pipeline.stages; do
  for s in reward dpo; do
    run "${layout%%:*}-$s" "${mpi[@]}" "${rlhf[@]}" "$s" --config rlhf.json --set "${layout#*:}=2" \
      --set "$s.output_dir=${layout%%:*}-$s" --metrics "${layout%%:*}-$s.jsonl"
  done
done
run pp-ppo "${mpi[@]}" "${rlhf[@]}" ppo --config rlhf.json --set pipeline.stages=2 --set ppo.output_dir=pp-ppo \
  --metrics pp-ppo.jsonl
python3 - <<'PY'
import json
ppo = ("reward", "chosen_reward", "kl", "kl_coef", "entropy", "actor_loss", "value_loss", "ptx_loss")
for layout, step, keys in [(l, s, k) for l in ("tp", "pp")
                           for s, k in (("reward", ("loss", "chosen_score", "rejected_score")),
                                        ("dpo", ("loss", "margin")))] + [("pp", "ppo", ppo)]:
    a, b = ([json.loads(l) for l in open(p)] for p in (f"{step}.jsonl", f"{layout}-{step}.jsonl"))
    assert len(a) == len(b), (layout, step, len(a), len(b))
    for x, y in zip(a, b):
        for k in keys:
            assert abs(x[k] - y[k]) <= 1e-4 * max(1.0, abs(x[k])), \
                f"{step} step {x['step']} {k}: {x[k]} alone, {y[k]} at {layout} 2"
print("ok   the reward model and DPO at tensor-parallel 2 and in two pipeline stages, and PPO in two pipeline "
      "stages, follow the single process")
PY

# The same five steps with a Llama (RMSNorm, rotary embedding, SwiGLU, grouped-query attention).
python3 - <<'PY'
import json
c = json.load(open("rlhf.json"))
c["model"] = {"arch": "llama", "n_layer": 1, "n_head": 4, "n_kv_head": 2, "d_model": 32, "intermediate_size": 64,
              "seq_len": 48, "vocab_size": 300}
for step in ("sft", "reward", "dpo", "ppo", "grpo"):
    c[step]["steps"] = 2
    c[step]["output_dir"] = "llama/" + step
for step in ("reward", "dpo"):
    c[step]["init"] = "llama/sft/model.h5"
for step in ("ppo", "grpo"):
    c[step]["reward_model"] = "llama/reward/model.h5"
    c[step]["actor"]["init"] = "llama/sft/model.h5"
c["ppo"]["critic"]["init"] = "llama/reward/model.h5"
json.dump(c, open("llama.json", "w"))
PY
for s in sft reward ppo grpo dpo; do
  run "llama-$s" "${rlhf[@]}" "$s" --config llama.json --metrics "llama-$s.jsonl"
done
python3 - <<'PY'
import json, math
for step in ("sft", "reward", "ppo", "grpo", "dpo"):
    rows = [json.loads(l) for l in open(f"llama-{step}.jsonl")]
    assert len(rows) == 2, (step, len(rows))
    for r in rows:
        for k, v in r.items():
            assert not isinstance(v, float) or math.isfinite(v), (step, k, v)
PY
for f in llama/sft/model.h5 llama/reward/model.h5 llama/ppo/actor.h5 llama/ppo/critic.h5 llama/grpo/actor.h5 llama/dpo/model.h5; do
  [[ -s $f ]] || { echo "FAIL: $f was not saved"; exit 1; }
done
echo "ok   every step ran with a Llama"
# PPO with a Llama in two pipeline stages: the critic trains as a Llama value model's layers.
run llama-ppo-pp "${mpi[@]}" "${rlhf[@]}" ppo --config llama.json --set pipeline.stages=2 \
  --set ppo.output_dir=llama/ppo-pp --metrics llama-ppo-pp.jsonl
[[ -s llama/ppo-pp/critic.h5 ]] || { echo "FAIL: PPO with a Llama in two stages saved no critic"; exit 1; }
echo "ok   PPO with a Llama in two pipeline stages"

# PPO stopped at step 2 and resumed: steps 3 and 4 as the uninterrupted run's (timings aside).
run ppo_half "${rlhf[@]}" ppo --config rlhf.json --set ppo.steps=2 --set checkpoint.dir=ckpt \
  --set checkpoint.every=2 --set ppo.output_dir=ppo_half --metrics resumed.jsonl
cp -r ckpt ckpt_half  # the step-2 checkpoints alone, resumed in pipeline stages below
run ppo_resumed "${rlhf[@]}" ppo --config rlhf.json --set checkpoint.dir=ckpt --set checkpoint.every=2 \
  --set ppo.output_dir=ppo_resumed --resume auto --metrics resumed.jsonl
python3 - ppo.jsonl resumed.jsonl <<'PY'
import json, sys
timing = ("generation_s", "experience_s", "training_s", "generation_tokens_per_s", "training_tokens_per_s",
          "generation_fraction", "step_ms")
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert [r["step"] for r in b] == [1, 2, 3, 4], [r["step"] for r in b]
for x, y in zip(a, b):
    for k, v in x.items():
        if k in timing or not isinstance(v, float):
            continue
        assert abs(v - y[k]) <= 1e-6 * max(1.0, abs(v)), f"step {x['step']} {k}: {v} uninterrupted, {y[k]} resumed"
print("ok   PPO resumed at step 2 equals the uninterrupted run (kl_coef %.6f at step 4)" % b[-1]["kl_coef"])
PY
for m in actor actor_ema; do  # the actor and its EMA (read back from ckpt/ema-step-00000002.h5) bit for bit
  "$bin/triad-ckpt" export "ppo/$m.h5" --format safetensors --out "$m-straight" >/dev/null
  "$bin/triad-ckpt" export "ppo_resumed/$m.h5" --format safetensors --out "$m-resumed" >/dev/null
  cmp -s "$m-straight/model.safetensors" "$m-resumed/model.safetensors" || { echo "FAIL: resumed $m.h5 differs"; exit 1; }
done
echo "ok   the resumed actor and its EMA equal the uninterrupted run's bit for bit"

# The single process's step-2 checkpoints resumed in two pipeline stages (each stage reads its
# layers of the actor, the critic and the EMA by name): steps 3 and 4 as the uninterrupted
# run's, and so its final actor and EMA.
run pp_resumed "${mpi[@]}" "${rlhf[@]}" ppo --config rlhf.json --set pipeline.stages=2 --set checkpoint.dir=ckpt_half \
  --set checkpoint.every=2 --set ppo.output_dir=pp_resumed --resume auto --metrics pp_resumed.jsonl
for m in actor actor_ema; do
  "$bin/triad-ckpt" export "pp_resumed/$m.h5" --format safetensors --out "$m-pp" >/dev/null
done
python3 - <<'PY'
import array, json, struct
def tensors(path):  # a safetensors file of f32 tensors, by name
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for name, t in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = array.array("f", raw[8 + n + a:8 + n + b])
    return out
a, b = ([json.loads(l) for l in open(p)] for p in ("ppo.jsonl", "pp_resumed.jsonl"))
assert [r["step"] for r in b] == [3, 4], [r["step"] for r in b]
for x, y in zip(a[2:], b):
    for k in ("reward", "chosen_reward", "kl", "kl_coef", "entropy", "actor_loss", "value_loss", "ptx_loss"):
        assert abs(x[k] - y[k]) <= 1e-4 * max(1.0, abs(x[k])), f"step {x['step']} {k}: {x[k]} alone, {y[k]} resumed at pp 2"
for m in ("actor", "actor_ema"):
    s, p = tensors(f"{m}-straight/model.safetensors"), tensors(f"{m}-pp/model.safetensors")
    assert s.keys() == p.keys(), (m, sorted(s.keys() ^ p.keys()))
    worst = max(abs(u - v) for k in s for u, v in zip(s[k], p[k]))
    assert worst <= 1e-4, f"{m}.h5: {worst} from the uninterrupted run's"
print("ok   PPO resumed in two pipeline stages from the single process's step 2 follows the uninterrupted run")
PY

# Bad input: each fails on every rank, naming the problem, without touching what was saved.
sums() { sha256sum sft/model.h5 reward/model.h5 ppo/actor.h5 ppo/critic.h5; }
before=$(sums)
expect() {  # expect WHAT PATTERN COMMAND...: fails within 120 s, both ranks print PATTERN
  local what=$1 pattern=$2
  shift 2
  local status=0
  timeout 120 "$@" >bad.log 2>&1 || status=$?
  if ((status == 0 || status == 124)); then echo "FAIL: $what: exit $status"; cat bad.log; exit 1; fi
  local ranks
  ranks=$(grep -Ec "$pattern" bad.log || true)
  if ((ranks < 2)); then echo "FAIL: $what: /$pattern/ on $ranks ranks, expected 2"; cat bad.log; exit 1; fi
  echo "ok   $what: exit $status, every rank says /$pattern/"
}
python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("pairs.jsonl")]
del rows[3]["chosen"]
with open("no_chosen.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
PY
expect "a row without chosen" 'no_chosen.jsonl:4: .*"chosen"' \
  "${mpi[@]}" "${rlhf[@]}" reward --config rlhf.json --set data.path=no_chosen.jsonl
expect "prompts all longer than the limit" 'max_prompt_seq_len' \
  "${mpi[@]}" "${rlhf[@]}" ppo --config rlhf.json --set data.max_prompt_seq_len=1 --set data.max_seq_len=20
expect "sequence parallelism without tensor parallelism" 'model.sequence_parallel needs model.tensor_parallel > 1' \
  "${mpi[@]}" "${rlhf[@]}" reward --config rlhf.json --set model.sequence_parallel=true
# A reward model of hidden size 48 (its own SFT start), then a critic configured at 32 from it.
run sft48 "${rlhf[@]}" sft --config rlhf.json --set model.d_model=48 --set sft.steps=1 --set sft.output_dir=sft48
run reward48 "${rlhf[@]}" reward --config rlhf.json --set model.d_model=48 --set reward.steps=1 \
  --set reward.init=sft48/model.h5 --set reward.output_dir=reward48
expect "a critic from a reward model of another hidden size" 'reward48/model.h5.*(48|shape)' \
  "${mpi[@]}" "${rlhf[@]}" ppo --config rlhf.json --set ppo.critic.init=reward48/model.h5
[[ $(sums) == "$before" ]] || { echo "FAIL: a failed run changed a saved model"; exit 1; }
echo "ok   the saved models are unchanged"
