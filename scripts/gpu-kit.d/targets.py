#!/usr/bin/env python3
"""The speed targets beside the figures the kit's steps measured, with the card's name.

    targets.py RESULTS_JSON SUMMARY_MD

Reads the kit's results.json (each step's last JSON line), appends a "Targets" table to
SUMMARY_MD and prints it: each target, the figure, PASS, MISS, or "not measured" where its
step did not run or print the figure.
"""
import json
import sys


def figure(steps, step, *keys):
    value = (steps.get(step) or {}).get("json")
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def rlhf_generation_fraction(steps):
    """PPO's generation share: the worst of bench_rlhf_cuda's runs, else rlhf_curves' last PPO step."""
    runs = ((steps.get("bench_rlhf_cuda") or {}).get("json") or {}).get("runs") or []
    shares = [r["generation_fraction"] for r in runs if isinstance(r.get("generation_fraction"), (int, float))]
    return max(shares) if shares else figure(steps, "rlhf_curves", "ppo_generation_fraction")


def main():
    results, summary = sys.argv[1:3]
    data = json.load(open(results))
    steps, card = data["steps"], data.get("device")
    # (target, figure, how it reads, passes)
    rows = [
        ("triad step MFU >= 45% at batch 16, 32 or 64 (GPT-2 124M, bf16)", figure(steps, "speed_step", "triad_mfu_max"),
         "%.1f%%", lambda v: v >= 0.45, 100),
        ("triad step MFU >= 45% recorded as a CUDA graph (GPT-2 124M, batch 16, bf16)",
         figure(steps, "bench_step_cuda_graph", "mfu"), "%.1f%%", lambda v: v >= 0.45, 100),
        ("triad step tokens/s over torch.compile's (best batch each) > 1",
         figure(steps, "speed_step", "triad_vs_compile_best"), "%.2f", lambda v: v > 1.0, 1),
        ("attention forward >= 250 TFLOP/s (bf16, hs 64, T 1024, causal)",
         figure(steps, "bench_attention", "fwd_tflops"), "%.1f TFLOP/s", lambda v: v >= 250, 1),
        ("attention backward >= 200 TFLOP/s (bf16, hs 64, T 1024, causal)",
         figure(steps, "bench_attention", "bwd_tflops"), "%.1f TFLOP/s", lambda v: v >= 200, 1),
        ("generation >= 50k tokens/s (RLHF demo actor, batch 32)",
         figure(steps, "bench_generate_cuda", "tokens_per_s_median"), "%.0f tokens/s", lambda v: v >= 50000, 1),
        ("PPO step: generation <= 50% of the time", rlhf_generation_fraction(steps), "%.1f%%", lambda v: v <= 0.5, 100),
        ("generation with CUDA graphs >= 50k tokens/s (GPT-2 124M, batch 16, sampled)",
         figure(steps, "decode_graphs", "graph_tokens_per_s_b16_sampled"), "%.0f tokens/s", lambda v: v >= 50000, 1),
        ("ZeRO-Offload (Adam on the host) step >= 0.7 of in device (GPT-2 124M, bf16, 8 micro-batches)",
         figure(steps, "offload_cpu", "offload_step_ratio"), "%.3f", lambda v: v >= 0.7, 1),
    ]
    lines = ["", "## Targets on %s" % card, "", "| target | figure | result |", "|---|---|---|"]
    for target, value, form, passes, scale in rows:
        if value is None:
            lines.append("| %s | - | not measured |" % target)
        else:
            lines.append("| %s | %s | %s |" % (target, form % (value * scale), "PASS" if passes(value) else "MISS"))
    text = "\n".join(lines) + "\n"
    with open(summary, "a") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
