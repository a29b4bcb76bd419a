#!/usr/bin/env python3
"""Generation with CUDA graphs against generation without (Note [Decode graphs] in
src/engine/generate.h), on GPT-2 124M in bf16, through `triad-bench generate --check-eager`:

  for batch 1 and 16, greedy, sampled untruncated (temperature 1, PPO's default) and
  sampled with top-k 40 and top-p 0.95, all with the bench's fixed seed: the tokens,
  log-probabilities and masks generated with graphs equal those without, bit for bit;
  tokens/s with and without graphs, and their ratio.

    decode_graphs.py [--prompt 64] [--answer 128] [--runs 3]

Fails when any pair differs or a run fails. Prints a table and, last, one JSON object.
"""
import argparse
import json
import subprocess
import sys

MODES = [("greedy", ["--temperature", "0"]),
         ("sampled", ["--temperature", "1", "--top-k", "0", "--top-p", "1"]),
         ("top_k_top_p", ["--temperature", "1", "--top-k", "40", "--top-p", "0.95"])]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--answer", type=int, default=128)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    rows, summary, ok = [], {}, True
    for batch in (1, 16):
        for mode, flags in MODES:
            cmd = ["triad-bench", "generate", "--device", "cuda", "--model", "gpt2-124m", "--set", "model.seq_len=1024",
                   "--batch", str(batch), "--prompt", str(a.prompt), "--answer", str(a.answer), "--runs", str(a.runs),
                   "--warmup", "1", "--check-eager"] + flags
            print("$ " + " ".join(cmd), flush=True)
            run = subprocess.run(cmd, capture_output=True, text=True)
            print(run.stdout + run.stderr, flush=True)
            lines = [l for l in run.stdout.splitlines() if l.startswith("{")]
            last = json.loads(lines[-1]) if lines else {}
            equal = run.returncode == 0 and last.get("graph_equals_eager") is True
            ok = ok and equal
            graph, eager = last.get("tokens_per_s_median"), last.get("eager_tokens_per_s_median")
            rows.append((batch, mode, graph, eager, last.get("graph_vs_eager"), equal, run.returncode))
            key = "b%d_%s" % (batch, mode)
            summary["graph_tokens_per_s_" + key] = graph
            summary["eager_tokens_per_s_" + key] = eager
            summary["graph_equals_eager_" + key] = equal
    print("\n| batch | sampling | tokens/s with graphs | without | ratio | equal |\n|---|---|---|---|---|---|")
    for batch, mode, graph, eager, ratio, equal, rc in rows:
        fmt = lambda v, f: f % v if isinstance(v, (int, float)) else "-"
        print("| %d | %s | %s | %s | %s | %s |" % (batch, mode, fmt(graph, "%.0f"), fmt(eager, "%.0f"),
                                                  fmt(ratio, "%.2f"), "yes" if equal else "NO (exit %d)" % rc))
    print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
