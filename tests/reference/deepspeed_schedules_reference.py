#!/usr/bin/env python3
"""DeepSpeed's learning-rate schedules as its own classes give them, for triad's schedules
(tests/optim/test_deepspeed_schedules.cpp compares optim/deepspeed_schedules.h with it).

What it produces: tests/data/deepspeed_schedules_reference.json
    {"deepspeed": version, "steps": 40, "cases": [case, ...]}, each case
      "name"       a label
      "type"       the class in deepspeed.runtime.lr_schedules (LRRangeTest, OneCycle,
                   WarmupLR, WarmupDecayLR, WarmupCosineLR: every class of the module,
                   checked below)
      "optimizer"  {"type": "AdamW" | "SGD", "lr": the optimizer's learning rate}
      "params"     the scheduler's keyword arguments, as a ds_config's scheduler.params
      "lr"         40 numbers: the learning rate optimizer step s = 0..39 uses
      "betas"      (OneCycle with momentum cycling) 40 pairs: the betas step s uses
    The parameters spread over log and linear warmup, warmup_num_steps 1 (DeepSpeed's
    max(2, .)), total_num_steps below, at and above warmup_num_steps, staircase, post-cycle
    decay of rate and momentum, stair counts, a second step size of 0, defaults left out;
    every schedule's end (total_num_steps, the cycle's length) falls inside the 40 steps.

How the schedules are driven: as DeepSpeed's engine drives a configured scheduler. It is
built on the optimizer (setting the rate, and OneCycle's betas, of step 0: the value at
last_batch_iteration -1); then each step takes the param group's values,
optimizer.step() runs and lr_scheduler.step() follows (engine._take_model_step).

How to rerun (CPU only; nothing is installed by the script)
    python3 -m venv /tmp/ds && /tmp/ds/bin/pip install torch deepspeed
    /tmp/ds/bin/python tests/reference/deepspeed_schedules_reference.py   (from the repository root)
"""

import inspect
import json
import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # deepspeed picks an accelerator on import
os.environ.setdefault("DS_BUILD_OPS", "0")

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime import lr_schedules  # noqa: E402

STEPS = 40
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "deepspeed_schedules_reference.json")


def case(name, type_, params, lr=6e-4, optimizer="AdamW"):
    return {"name": name, "type": type_, "optimizer": {"type": optimizer, "lr": lr}, "params": params}


CASES = [
    # LRRangeTest
    case("range defaults", "LRRangeTest", {}),
    case("range continuous", "LRRangeTest",
         {"lr_range_test_min_lr": 1e-3, "lr_range_test_step_size": 7, "lr_range_test_step_rate": 2.5}),
    case("range staircase", "LRRangeTest",
         {"lr_range_test_min_lr": 1e-3, "lr_range_test_step_size": 7, "lr_range_test_step_rate": 2.5,
          "lr_range_test_staircase": True}),
    case("range step 1", "LRRangeTest",
         {"lr_range_test_min_lr": 5e-5, "lr_range_test_step_size": 1, "lr_range_test_step_rate": 0.1,
          "lr_range_test_staircase": True}),
    # OneCycle
    case("cycle symmetric", "OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2, "cycle_first_step_size": 10}),
    case("cycle asymmetric decay", "OneCycle",
         {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2, "cycle_first_step_size": 8, "cycle_second_step_size": 12,
          "decay_lr_rate": 0.5, "decay_step_size": 4}),
    case("cycle short decay every step", "OneCycle",
         {"cycle_min_lr": 2e-4, "cycle_max_lr": 3e-3, "cycle_first_step_size": 5, "cycle_second_step_size": 3,
          "decay_lr_rate": 1.0, "decay_step_size": 1}),
    case("cycle second step 0", "OneCycle",
         {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 6, "cycle_second_step_size": 0}),
    case("cycle momentum decay", "OneCycle",
         {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2, "cycle_first_step_size": 6, "cycle_second_step_size": 9,
          "decay_lr_rate": 0.2, "decay_step_size": 3, "cycle_min_mom": 0.85, "cycle_max_mom": 0.95,
          "decay_mom_rate": 0.01}),
    case("cycle no momentum", "OneCycle",
         {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2, "cycle_first_step_size": 7, "cycle_momentum": False,
          "decay_lr_rate": 0.3, "decay_step_size": 2}),
    case("cycle sgd", "OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2, "cycle_first_step_size": 4},
         optimizer="SGD"),
    case("cycle stairs", "OneCycle",
         {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2, "cycle_first_step_size": 10, "cycle_second_step_size": 6,
          "cycle_first_stair_count": 3}),
    case("cycle stairs both", "OneCycle",
         {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2, "cycle_first_step_size": 9, "cycle_second_step_size": 7,
          "cycle_first_stair_count": 4, "cycle_second_stair_count": 2, "decay_lr_rate": 0.5, "decay_step_size": 5,
          "decay_mom_rate": 0.02}),
    # WarmupLR
    case("warmup defaults", "WarmupLR", {}),
    case("warmup log", "WarmupLR", {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4, "warmup_num_steps": 25}),
    case("warmup linear", "WarmupLR",
         {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4, "warmup_num_steps": 10, "warmup_type": "linear"}),
    case("warmup one step", "WarmupLR", {"warmup_max_lr": 1e-3, "warmup_num_steps": 1}),
    case("warmup optimizer lr", "WarmupLR", {"warmup_min_lr": 1e-6, "warmup_num_steps": 12, "warmup_type": "linear"},
         lr=2e-3),
    # WarmupDecayLR
    case("decay log", "WarmupDecayLR",
         {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4, "warmup_num_steps": 10, "total_num_steps": 30}),
    case("decay linear", "WarmupDecayLR",
         {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 8, "total_num_steps": 24,
          "warmup_type": "linear"}),
    case("decay defaults", "WarmupDecayLR", {"total_num_steps": 20}),
    case("decay total below warmup", "WarmupDecayLR",
         {"warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 20, "total_num_steps": 15,
          "warmup_type": "linear"}),
    case("decay total at warmup", "WarmupDecayLR",
         {"warmup_max_lr": 1e-3, "warmup_num_steps": 12, "total_num_steps": 12}),
    # WarmupCosineLR
    case("cosine short", "WarmupCosineLR", {"total_num_steps": 3, "warmup_num_steps": 2, "cos_min_ratio": 0.1}),
    case("cosine log", "WarmupCosineLR", {"total_num_steps": 30, "warmup_num_steps": 10}),
    case("cosine linear ratios", "WarmupCosineLR",
         {"total_num_steps": 25, "warmup_num_steps": 8, "warmup_type": "linear", "warmup_min_ratio": 0.1,
          "cos_min_ratio": 0.2}, lr=1e-3),
    case("cosine one warmup step", "WarmupCosineLR",
         {"total_num_steps": 12, "warmup_num_steps": 1, "warmup_type": "linear", "cos_min_ratio": 0.0}),
    case("cosine total below warmup", "WarmupCosineLR",
         {"total_num_steps": 6, "warmup_num_steps": 10, "warmup_type": "linear", "warmup_min_ratio": 0.5}),
    case("cosine total at warmup", "WarmupCosineLR", {"total_num_steps": 10, "warmup_num_steps": 10,
                                                      "cos_min_ratio": 0.05}),
]


def run(c):
    p = torch.nn.Parameter(torch.zeros(2))
    if c["optimizer"]["type"] == "AdamW":
        opt = torch.optim.AdamW([p], lr=c["optimizer"]["lr"], betas=(0.9, 0.999))
    else:
        opt = torch.optim.SGD([p], lr=c["optimizer"]["lr"])
    sched = getattr(lr_schedules, c["type"])(opt, **c["params"])
    lrs, betas = [], []
    for _ in range(STEPS):
        group = opt.param_groups[0]
        lrs.append(float(group["lr"]))
        if "betas" in group:
            betas.append([float(b) for b in group["betas"]])
        p.grad = torch.zeros_like(p)
        opt.step()
        sched.step()
    out = dict(c, lr=lrs)
    if c["type"] == "OneCycle" and getattr(sched, "cycle_momentum", False):
        out["betas"] = betas
    return out


def main():
    classes = {n for n, o in inspect.getmembers(lr_schedules, inspect.isclass) if o.__module__ == lr_schedules.__name__}
    covered = {c["type"] for c in CASES}
    assert classes == covered == set(lr_schedules.VALID_LR_SCHEDULES), (classes, covered)
    cases = [run(c) for c in CASES]
    with open(OUT, "w") as f:
        json.dump({"deepspeed": deepspeed.__version__, "steps": STEPS, "cases": cases}, f, indent=1)
        f.write("\n")
    print("wrote %s: %d cases of %d steps (deepspeed %s)" % (OUT, len(cases), STEPS, deepspeed.__version__))


if __name__ == "__main__":
    main()
