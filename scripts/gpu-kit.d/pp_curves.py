#!/usr/bin/env python3
"""Pipeline parallelism on the GPU: the demo model trained in f32 on the GPU by one process
and by a pipeline of two stages (mpirun -np 2, sharing the GPU, activations between stages
through host memory), with the 1F1B schedule over 4 micro-batches. Passes when the pipeline's
curve equals the one-process curve at every step within 1e-4 relative. Prints the curves every
10 steps and, last, one JSON object with the figures.
"""
import argparse
import json
import os
import sys

from compare_curves import train

BOUND = 1e-4


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kit", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    common = ["--set", "device=cuda", "--set", "train_micro_batch_size_per_gpu=4"]
    mpi = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"]
    one = train(a.kit, a.work, "pp1", a.steps, common)
    pp2 = train(a.kit, a.work, "pp2", a.steps, common + ["--set", "pipeline.stages=2"], mpi)
    err = max(abs(x - y) / abs(y) for x, y in zip(pp2, one))
    print("\n step       pp 1       pp 2")
    for s in sorted({0, *range(9, a.steps, 10), a.steps - 1}):
        print("%5d  %9.5f  %9.5f" % (s + 1, one[s], pp2[s]))
    print("\npp 2 vs pp 1: max relative difference %.2e (bound %.0e)" % (err, BOUND))
    ok = err <= BOUND
    print(json.dumps({"check": "pp_curves", "steps": a.steps, "ok": ok, "pp2_vs_pp1": err, "pp1": one, "pp2": pp2}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
