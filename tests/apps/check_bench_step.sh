#!/usr/bin/env bash
# triad-bench step on the models a config describes: the Llama of configs/llama-demo.json is
# the model timed (its parameter count against the closed form of its shape, worked from the
# config: embedding, per layer q, k, v, o, SwiGLU and two norms, final norm, untied head), and
# --cuda-graph (on the CPU the step as it would be recorded) trains with the plain step's
# losses, the first near ln V.
#   check_bench_step.sh TRIAD_BENCH CONFIG
set -uo pipefail
bench=$1 config=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

run() {  # run NAME ARGS...: the output into $out/NAME.txt, the JSON last line into $out/NAME.json
  local name=$1
  shift
  OMP_NUM_THREADS=1 "$bench" step --config "$config" --batch 2 --seq 32 --warmup 2 --steps 2 "$@" >"$out/$name.txt" 2>&1 ||
    { cat "$out/$name.txt"; fail "$name exited $?"; }
  tail -n 1 "$out/$name.txt" >"$out/$name.json"
}

run plain
run graph --cuda-graph
python3 - "$config" "$out" <<'PY' || fail "see above"
import json, math, sys
config, out = sys.argv[1], sys.argv[2]
m = json.load(open(config))["model"]
L, C, NH, NKV, I, V = m["n_layer"], m["d_model"], m["n_head"], m["n_kv_head"], m["intermediate_size"], m["vocab_size"]
hs = C // NH
want = V * C + L * (2 * C * C + 2 * C * NKV * hs + 3 * C * I + 2 * C) + C + V * C
ok = True
for name in ("plain", "graph"):
    j = json.loads(open(f"{out}/{name}.json").read())
    if j["params"] != want:
        print(f"{name}: params {j['params']}, the Llama of {config} has {want}"); ok = False
    if j["cuda_graph"] != (name == "graph"):
        print(f"{name}: cuda_graph {j['cuda_graph']}"); ok = False
def losses(name):  # each step's row: step fwd bwd optim total loss
    rows = [line.split() for line in open(f"{out}/{name}.txt")]
    return [float(f[5]) for f in rows if len(f) >= 6 and f[0].isdigit()]
plain, graph = losses("plain"), losses("graph")
if len(plain) != 4 or graph != plain or abs(plain[0] - math.log(V)) > 1.0:
    print(f"losses: plain {plain}, graph {graph} (ln V = {math.log(V):.3f})"); ok = False
sys.exit(0 if ok else 1)
PY
echo "triad-bench step: the Llama of $config timed, --cuda-graph as the plain step"
