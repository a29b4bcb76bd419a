#!/usr/bin/env python3
"""The RLHF pipeline on the GPU: configs/rlhf-demo.json's steps, shortened, with the kit's
fortune pairs, through triad-rlhf. SFT (from scratch) and the reward model run in f32 on the
CPU and on the GPU from the same start; PPO, GRPO and DPO run on the GPU from the GPU's SFT
and reward models, and PPO's first step also on the CPU. Passes when

  - the GPU's SFT and reward-model losses equal the CPU's at every step within 1e-3
    relative (the same arithmetic in another summation order), and
  - PPO, GRPO and DPO finish with finite metrics at every step.

Reports PPO's time split (generation, experience, training) and tokens/s on the GPU, and
its first step's mean reward on the GPU against the CPU (the same samples unless a sampled
token sits on a rounding boundary: reported, not asserted). Last line: one JSON object.
"""
import argparse
import json
import math
import os
import subprocess
import sys

BOUND = 1e-3
STEPS = {"sft": 60, "reward": 60, "ppo": 10, "grpo": 6, "dpo": 10}


def config(kit, work):
    c = json.load(open(os.path.join(kit, "configs", "rlhf-demo.json")))
    c["data"]["path"] = os.path.join(kit, "data", "pairs.jsonl")
    c["data"]["tokenizer"] = os.path.join(kit, "data", "tokenizer.json")
    c["log_interval"] = 5
    c["sft"].pop("init")
    for step, n in STEPS.items():
        c[step]["steps"] = n
        c[step]["log_interval"] = 5
        c[step].pop("eval_interval", None)
    sft, reward = os.path.join(work, "sft_cuda", "model.h5"), os.path.join(work, "reward_cuda", "model.h5")
    c["reward"]["init"] = c["dpo"]["init"] = sft
    for step in ("ppo", "grpo"):
        c[step]["reward_model"] = reward
        c[step]["actor"]["init"] = sft
    c["ppo"]["critic"]["init"] = reward
    path = os.path.join(work, "rlhf.json")
    json.dump(c, open(path, "w"), indent=1)
    return path


def run(kit, work, cfg, step, device, steps=None):
    name = "%s_%s" % (step, device)
    metrics = os.path.join(work, name + ".jsonl")
    cmd = [os.path.join(kit, "bin", "triad-rlhf"), step, "--config", cfg, "--metrics", metrics,
           "--set", "device=" + device, "--set", "%s.output_dir=%s" % (step, os.path.join(work, name))]
    if steps is not None:
        cmd += ["--set", "%s.steps=%d" % (step, steps)]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return [r for r in (json.loads(line) for line in open(metrics) if line.strip()) if "loss" in r or "reward" in r]


def finite(rows):
    return all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, (int, float)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kit", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cfg = config(a.kit, a.work)
    rel = lambda x, y: abs(x - y) / max(abs(y), 1e-12)
    figures, ok = {}, True
    for step in ("sft", "reward"):
        gpu, cpu = run(a.kit, a.work, cfg, step, "cuda"), run(a.kit, a.work, cfg, step, "cpu")
        err = max(rel(g["loss"], c["loss"]) for g, c in zip(gpu, cpu))
        print("%s: %d steps, loss %.4f -> %.4f on the GPU; max relative difference to the CPU %.2e (bound %.0e)"
              % (step, len(gpu), gpu[0]["loss"], gpu[-1]["loss"], err, BOUND))
        figures[step + "_cuda_vs_cpu"] = err
        ok = ok and len(gpu) == len(cpu) == STEPS[step] and err <= BOUND
    for step in ("ppo", "grpo", "dpo"):
        rows = run(a.kit, a.work, cfg, step, "cuda")
        good = len(rows) == STEPS[step] and finite(rows)
        print("%s: %d steps on the GPU, metrics %s" % (step, len(rows), "finite" if good else "NOT finite or missing"))
        ok = ok and good
        if step == "ppo" and rows:
            last = rows[-1]
            for k in ("generation_tokens_per_s", "training_tokens_per_s", "generation_fraction", "generation_s",
                      "experience_s", "training_s", "reward", "kl"):
                if k in last:
                    figures["ppo_" + k] = last[k]
            cpu = run(a.kit, a.work, cfg, step, "cpu", steps=1)
            figures["ppo_first_reward_cuda"], figures["ppo_first_reward_cpu"] = rows[0]["reward"], cpu[0]["reward"]
            print("ppo: first step's mean reward %.6f on the GPU, %.6f on the CPU" % (rows[0]["reward"], cpu[0]["reward"]))
    print(json.dumps(dict({"check": "rlhf_curves", "ok": ok}, **figures)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
