#!/usr/bin/env python3
"""Tensor parallelism on the GPU: the demo model trained in f32 on the GPU by one process and
by a tensor-parallel group of two ranks (mpirun -np 2, sharing the GPU through host memory),
with and without sequence parallelism. Passes when both tensor-parallel curves equal the
one-process curve at every step within 1e-4 relative (the same arithmetic in another
summation order: the tests hold the CPU to 1e-5). Prints the curves every 10 steps and, last,
one JSON object with the figures.
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
    cuda = ["--set", "device=cuda"]
    mpi = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"]
    one = train(a.kit, a.work, "tp1", a.steps, cuda)
    tp2 = train(a.kit, a.work, "tp2", a.steps, cuda + ["--set", "model.tensor_parallel=2"], mpi)
    sp = train(a.kit, a.work, "tp2_sp", a.steps,
               cuda + ["--set", "model.tensor_parallel=2", "--set", "model.sequence_parallel=true"], mpi)
    rel = lambda x, y: abs(x - y) / abs(y)
    tp_err = max(rel(x, y) for x, y in zip(tp2, one))
    sp_err = max(rel(x, y) for x, y in zip(sp, one))
    print("\n step       tp 1       tp 2  tp 2 + sp")
    for s in sorted({0, *range(9, a.steps, 10), a.steps - 1}):
        print("%5d  %9.5f  %9.5f  %9.5f" % (s + 1, one[s], tp2[s], sp[s]))
    print("\ntp 2 vs tp 1: max relative difference %.2e (bound %.0e)" % (tp_err, BOUND))
    print("tp 2 + sequence parallel vs tp 1: %.2e" % sp_err)
    ok = tp_err <= BOUND and sp_err <= BOUND
    print(json.dumps({"check": "tp_curves", "steps": a.steps, "ok": ok, "tp2_vs_tp1": tp_err, "tp2_sp_vs_tp1": sp_err,
                      "tp1": one, "tp2": tp2, "tp2_sp": sp}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
