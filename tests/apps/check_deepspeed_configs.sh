#!/usr/bin/env bash
# Configs written the way DeepSpeed's documentation writes them (tests/data/deepspeed_configs:
# each ZeRO stage, f32/bf16/fp16, every scheduler, Adam's L2 mode and OneCycle's momentum,
# ZeRO-2 with the optimizer's state offloaded to NVMe, whose files must be gone afterwards)
# train for 12 steps on 4 ranks through
# `triad-train --config model.json --deepspeed <file>`, and so do the ZeRO-2 and ZeRO-3
# ds_config.json examples of Hugging Face's DeepSpeed integration (hf_trainer/, "auto" and
# all) beside hf_trainer/training.json, which holds the model, data and training values the
# "auto"s take. Every step's learning rate in the metrics equals the one DeepSpeed's
# schedule gives (evaluated here, in Python, as DeepSpeed steps its scheduler: the step after
# k steps taken has the rate of iteration k - 1; a step skipped for overflow is not taken).
#   check_deepspeed_configs.sh BIN_DIR CONFIG_DIR
set -euo pipefail
bin=$(cd "$1" && pwd) configs=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

"$bin/triad-data" tokenizer --corpus /usr/share/common-licenses --vocab-size 300 --out "$work/tok.json" >/dev/null
"$bin/triad-data" encode --tokenizer "$work/tok.json" --corpus /usr/share/common-licenses --out "$work/tokens.bin" >/dev/null
cd "$work"  # csv_monitor's relative output_path lands here
mkdir nvme  # offload_optimizer's relative nvme_path: each rank's state file while it trains
for ds in "$configs"/zero*.json "$configs"/hf_trainer/ds_config_zero*.json; do
  name=$(basename "$ds" .json)
  config="$configs/model.json"
  [[ $ds == */hf_trainer/* ]] && config="$configs/hf_trainer/training.json"
  if ! mpirun -np 4 --oversubscribe --bind-to none "$bin/triad-train" --config "$config" --deepspeed "$ds" \
      --set data.corpus="$work/tokens.bin" --set data.tokenizer="$work/tok.json" --metrics "$work/$name.jsonl" \
      >"$work/$name.log" 2>&1; then
    echo "FAIL: $name"; cat "$work/$name.log"; exit 1
  fi
  if [[ -n $(ls -A nvme) ]]; then echo "FAIL: $name left swap files: $(ls nvme)"; exit 1; fi
  python3 - "$ds" "$work/$name.jsonl" "$config" <<'PY'
import json, math, sys
ds, metrics = json.load(open(sys.argv[1])), [json.loads(l) for l in open(sys.argv[2])]
cfg = json.load(open(sys.argv[3]))
# HF's "auto": the training config's value; warmup_min_lr 0 and warmup_max_lr the lr
# (docs/deepspeed-config.md).
lr0 = cfg.get("optimizer", {}).get("params", {}).get("lr", ds["optimizer"]["params"]["lr"])
s = ds["scheduler"]["type"]
p = dict(ds["scheduler"].get("params", {}), **cfg.get("scheduler", {}).get("params", {}))
p = {k: {"warmup_min_lr": 0.0, "warmup_max_lr": lr0}.get(k) if v == "auto" else v for k, v in p.items()}
W = max(2, p.get("warmup_num_steps", 1000))
def gamma(i):
    return math.log(i + 1) / math.log(W) if p.get("warmup_type", "log") == "log" else i / W
def rate(i):  # the schedule's rate at batch iteration i (DeepSpeed's lr_schedules.py docs)
    if s in ("WarmupLR", "WarmupDecayLR"):
        lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", lr0 if s == "WarmupLR" else 0.001)
        if i < 0: return lo
        if i < W: return lo + (hi - lo) * gamma(i)
        if s == "WarmupLR": return hi
        T = p["total_num_steps"]
        return lo + (hi - lo) * max(0.0, (T - i) / max(1.0, T - W))
    if s == "WarmupCosineLR":
        if i < 0: return 0.0
        wmin, cmin, T = p.get("warmup_min_ratio", 0.0), p.get("cos_min_ratio", 0.0001), p["total_num_steps"]
        if i < W: return lr0 * (wmin + gamma(i) * (1 - wmin))
        progress = min(1.0, (i - W + 1) / max(1, T - W))
        return lr0 * max(0.0, cmin + (1 - cmin) * (1 + math.cos(math.pi * progress)) / 2)
    if s == "OneCycle":
        lo, hi = p["cycle_min_lr"], p["cycle_max_lr"]
        first = p.get("cycle_first_step_size", 2000)
        second = first if p.get("cycle_second_step_size") is None else p["cycle_second_step_size"]
        size = first + second
        if i < 0: return lo
        if i < size:
            b = i + 1; x = 1 + b / size - math.floor(1 + b / size); r = first / size
            n1 = p.get("cycle_first_stair_count", 0)
            n = n1 if x <= r or p.get("cycle_second_stair_count") is None else p["cycle_second_stair_count"]
            if n:
                c = b % size
                return lo + (hi - lo) * math.floor(c * n / first if c <= first else (size - c) * n / second) / n
            return lo + (hi - lo) * (x / r if x <= r else (x - 1) / (r - 1))
        if p.get("decay_step_size", 0) == 0 or p.get("decay_lr_rate", 0) == 0: return lo
        return lo / (1 + p["decay_lr_rate"] * (i - size + 1) / p["decay_step_size"])
    if s == "LRRangeTest":
        lo = p.get("lr_range_test_min_lr", 1e-3)
        if i < 0: return lo
        n = (i + 1) / p.get("lr_range_test_step_size", 2000)
        if p.get("lr_range_test_staircase", False): n = math.floor(n)
        return lo * (1 + p.get("lr_range_test_step_rate", 1.0) * n)
    raise SystemExit("unknown scheduler " + s)
# The schedule counts the steps taken: an fp16 step skipped for overflow does not advance it.
taken, bad = 0, []
for m in metrics:
    want = rate(taken - 1)
    if abs(m["lr"] - want) > 1e-12 * max(1.0, abs(want)): bad.append((m["step"], m["lr"], want))
    taken += 0 if m.get("skipped") else 1
if len(metrics) != 12 or bad:
    raise SystemExit("FAIL: %s: %d steps; learning rates off (step, got, want): %s" % (sys.argv[1], len(metrics), bad))
print("%s: 12 steps, learning rates as DeepSpeed's %s gives them, last loss %.4f" % (
    sys.argv[1].split("/")[-1], s, metrics[-1]["loss"]))
# csv_monitor: DeepSpeed's files, read back with Python's csv module.
monitor = ds.get("csv_monitor", {})
if monitor.get("enabled"):
    import csv, os
    folder = os.path.join(monitor.get("output_path", ""), monitor.get("job_name", "DeepSpeedJobName"))
    batch = ds.get("train_batch_size") or ds["train_micro_batch_size_per_gpu"] * ds.get("gradient_accumulation_steps", 1) * 4
    for name, key in (("train_loss", "loss"), ("lr", "lr")) + ((("loss_scale", "loss_scale"),) if "fp16" in ds else ()):
        rows = list(csv.reader(open(os.path.join(folder, "Train_Samples_%s.csv" % name))))
        want = [["step", name]] + [[str(m["step"] * batch), m[key]] for m in metrics]
        if rows[0] != want[0] or len(rows) != len(want) or any(
                r[0] != w[0] or abs(float(r[1]) - w[1]) > 1e-12 * max(1.0, abs(w[1])) for r, w in zip(rows[1:], want[1:])):
            raise SystemExit("FAIL: csv_monitor's %s file differs: %s" % (name, rows[:3]))
    print("  csv_monitor: Train_Samples_{train_loss,lr,...}.csv hold each step's values by samples")
# tensorboard: the event file read record by record, each CRC-32C (masked) checked and each
# Event / Summary / Value decoded from the protocol-buffer wire format.
board = ds.get("tensorboard", {})
if board.get("enabled"):
    import glob, os, struct
    def crc32c(data):
        crc = 0xFFFFFFFF
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        return crc ^ 0xFFFFFFFF
    def masked(data):
        c = crc32c(data)
        return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    def fields(buf):  # (number, wire type, value) of one message
        i = 0
        def varint():
            nonlocal i
            v = shift = 0
            while True:
                b = buf[i]; i += 1; v |= (b & 0x7F) << shift; shift += 7
                if b < 0x80: return v
        while i < len(buf):
            key = varint(); number, wire = key >> 3, key & 7
            if wire == 0: yield number, wire, varint()
            elif wire == 1: yield number, wire, buf[i:i + 8]; i += 8
            elif wire == 5: yield number, wire, buf[i:i + 4]; i += 4
            elif wire == 2: n = varint(); yield number, wire, buf[i:i + n]; i += n
            else: raise SystemExit("FAIL: tensorboard: wire type %d" % wire)
    files = glob.glob(os.path.join(board.get("output_path", ""), board.get("job_name", "DeepSpeedJobName"),
                                   "events.out.tfevents.*"))
    if len(files) != 1: raise SystemExit("FAIL: tensorboard: event files %s" % files)
    data, at, events = open(files[0], "rb").read(), 0, []
    while at < len(data):
        header = data[at:at + 8]; (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        record = data[at + 12:at + 12 + length]; (record_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if header_crc != masked(header) or record_crc != masked(record):
            raise SystemExit("FAIL: tensorboard: CRC mismatch in the record at byte %d" % at)
        at += 16 + length
        event = {n: v for n, w, v in fields(record)}
        if 3 in event:
            if event[3] != b"brain.Event:2": raise SystemExit("FAIL: tensorboard: file_version %r" % event[3])
            continue
        for n, w, value in fields(event[5]):
            v = {n: x for n, w, x in fields(value)}
            events.append((v[1].decode(), event.get(2, 0), struct.unpack("<f", v[2])[0]))
    batch = ds.get("train_batch_size") or ds["train_micro_batch_size_per_gpu"] * ds.get("gradient_accumulation_steps", 1) * 4
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    for tag, key in (("Train/Samples/train_loss", "loss"), ("Train/Samples/lr", "lr")):
        got = [(step, value) for t, step, value in events if t == tag]
        want = [(m["step"] * batch, f32(m[key])) for m in metrics]
        if got != want:
            raise SystemExit("FAIL: tensorboard's %s: %s, want %s" % (tag, got[:3], want[:3]))
    print("  tensorboard: %d records, CRCs valid; train_loss and lr at every step by samples" % (len(events) + 1))
# flops_profiler: DeepSpeed's report at profile_step, written to output_file. The GPT's
# forward multiply-accumulates of one micro-batch per rank: per block the qkv, proj and MLP
# products and attention's two (2·B·T·T·C), and the tied head (tests/profiler/test_flops_profiler
# checks each module).
profiler = ds.get("flops_profiler", {})
if profiler.get("enabled"):
    model = json.load(open(sys.argv[3]))["model"]
    L, C, T, V = model["n_layer"], model["d_model"], model["seq_len"], model["vocab_size"]
    micro = ds.get("train_micro_batch_size_per_gpu") or ds["train_batch_size"] // (4 * ds.get("gradient_accumulation_steps", 1))
    N = micro * T
    macs = L * (N * C * 3 * C + 2 * micro * T * T * C + N * C * C + 2 * N * C * 4 * C) + N * C * V
    report = open(profiler["output_file"]).read()
    mega = "%g MMACs" % round(macs / 1e6, 2) if macs >= 1e6 else "%g KMACs" % round(macs / 1e3, 2)
    import re
    for want in ("Profile Summary at step %d:" % profiler["profile_step"], r"world size: +4 ",
                 "fwd MACs per GPU: +" + mega, "Detailed Profile per GPU", r"\(mlp\): MLP\("):
        if not re.search(want, report):
            raise SystemExit("FAIL: flops_profiler's report lacks %r:\n%s" % (want, report))
    print("  flops_profiler: the report at step %d, %s per micro-batch forward" % (profiler["profile_step"], mega))
PY
done
