#!/usr/bin/env bash
# The kit's runner, started from the unpacked kit (scripts/gpu-kit run): every GPU check of
# triad on this machine, one step at a time, none stopping the others. Steps that need a GPU
# are skipped, each with a line saying so, where there is none. Each step's output goes to
# logs/<step>.log; OUT receives summary.md (a table: step, result, seconds, note and the
# main figures of the JSON line the step's program printed last),
# results.json (each step's result and the JSON line its program printed last) and
# logs.tar.gz. The last line printed is `N passed, N failed`.
#
#   run.sh [OUT]     OUT defaults to $OUT, else ./gpu-kit-out
#   GPU_KIT_BUDGET   seconds for all the steps (default 540: one device call may run 600);
#                    a step that would start later is reported as not run
#   GPU_KIT_ONLY     a regular expression (bash =~): run only the steps whose names match
#                    (e.g. '^(bench_attention|bench_generate_cuda|profile_kernels|speed_step)$')
set -uo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-$PWD/gpu-kit-out}}
budget=${GPU_KIT_BUDGET:-540}
logs=$kit/logs
work=$kit/work
mkdir -p "$out" "$logs" "$work"
cores=$(nproc)

# The machine's own library path, for the programs that are not the kit's (PyTorch's peer).
export TRIAD_MACHINE_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}
. "$kit/env.sh"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{
  echo "kit: $(sed -n 2p "$kit/MANIFEST.txt")"
  echo "machine: $(uname -srm), $cores cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  if ((gpus > 0)); then nvidia-smi; else echo "nvidia-smi: no GPU listed"; fi
} 2>&1 | tee "$logs/machine.log"
device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

# --- steps
results=$work/results.tsv
: >"$results"
start=$SECONDS
passed=0 failed=0 skipped=0

# step NAME TIMEOUT gpu|any COMMAND...: runs COMMAND with its output in logs/NAME.log. Exit 0
# passes, 77 is a skip the program explains on its last line, anything else fails. COMMAND
# finds its time limit in GPU_KIT_STEP_LIMIT.
step() {
  local name=$1 limit=$2 needs=$3
  shift 3
  [[ -z ${GPU_KIT_ONLY:-} || $name =~ $GPU_KIT_ONLY ]] || return 0
  local log=$logs/$name.log result note=""
  if [[ $needs == gpu ]] && ((gpus == 0)); then
    echo "SKIP $name: no GPU on this machine (nvidia-smi lists none)"
    printf '%s\tskipped\t0\tno GPU\n' "$name" >>"$results"
    skipped=$((skipped + 1))
    return
  fi
  local left=$((budget - (SECONDS - start)))
  if ((left < 15)); then
    echo "SKIP $name: not run, the ${budget} s budget is spent"
    printf '%s\tnot run\t0\tbudget spent\n' "$name" >>"$results"
    skipped=$((skipped + 1))
    return
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS
  if declare -F "$1" >/dev/null; then set -- bash -c '"$@"' bash "$@"; fi  # a function of this script
  GPU_KIT_STEP_LIMIT=$limit timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null
  local rc=$? seconds=$((SECONDS - t0))
  case $rc in
    0) result=passed passed=$((passed + 1)) ;;
    77) result=skipped skipped=$((skipped + 1)) note=$(tail -n 1 "$log") ;;
    124 | 137) result=failed failed=$((failed + 1)) note="timed out after $limit s" ;;
    *) result=failed failed=$((failed + 1)) note="exit $rc" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$result" "$seconds" "$note" >>"$results"
  echo "${result^^} $name (${seconds} s)${note:+: $note}"
  if [[ $result == failed ]]; then tail -n 15 "$log" | sed 's/^/    | /'; fi
}

check_libraries() {
  local files missing
  files=$(kit_elf_files | wc -l)
  missing=$(kit_unresolved)
  ((files > 0)) || { echo "no programs found in $TRIAD_GPU_KIT"; return 1; }
  [[ -z $missing ]] || { echo "unresolved:"; echo "$missing"; return 1; }
  echo "every library of the kit's $files programs and plugins resolves"
}
export -f check_libraries kit_elf_files kit_unresolved

demo_data=(--set data.corpus="$kit/data/tokens.bin" --set data.tokenizer="$kit/data/tokenizer.json")
mpi=(mpirun --oversubscribe --bind-to none)

step libraries 60 any check_libraries
step mpi_cpu_train 120 any env OMP_NUM_THREADS=1 "${mpi[@]}" -np 2 triad-train --config "$kit/configs/tiny.json" \
  "${demo_data[@]}" --set model.vocab_size=2048 --set output_dir="$work/mpi_cpu_train" --steps 5

while read -r test ranks; do
  if [[ $ranks == - ]]; then
    step "$test" 300 gpu env OMP_NUM_THREADS=$((cores < 8 ? cores : 8)) "$kit/tests/$test"
  else
    for np in ${ranks//,/ }; do
      step "${test}_np$np" 300 gpu env OMP_NUM_THREADS=$((cores / np > 0 ? cores / np : 1)) \
        "${mpi[@]}" -np "$np" "$kit/tests/$test"
    done
  fi
done <"$kit/tests/gpu-tests.txt"

step bench_step_cuda 240 gpu triad-bench step --device cuda
step bench_step_cuda_graph 240 gpu triad-bench step --device cuda --cuda-graph
step bench_generate_cuda 120 gpu triad-bench generate --device cuda --runs 5
step bench_cublaslt 180 gpu bench-cublaslt
step bench_attention 120 gpu triad-bench attention --device cuda
step train_curves 300 gpu env OMP_NUM_THREADS="$cores" "$kit/compare_curves.py" --kit "$kit" --work "$work/curves" --steps 50
step llama_curves 240 gpu env OMP_NUM_THREADS="$cores" "$kit/compare_curves.py" --kit "$kit" --work "$work/llama_curves" \
  --config llama-demo.json --steps 50
step pp_curves 240 gpu env OMP_NUM_THREADS=$((cores / 2)) "$kit/pp_curves.py" --kit "$kit" --work "$work/pp_curves" --steps 40
step rlhf_curves 300 gpu env OMP_NUM_THREADS="$cores" "$kit/rlhf_curves.py" --kit "$kit" --work "$work/rlhf_curves"
step tp_curves 240 gpu env OMP_NUM_THREADS=$((cores / 2)) "$kit/tp_curves.py" --kit "$kit" --work "$work/tp_curves" --steps 40
step bench_step_cuda_tp2 240 gpu env OMP_NUM_THREADS=$((cores / 2)) "${mpi[@]}" -np 2 triad-bench step --device cuda --tp 2
step bench_rlhf_cuda 240 gpu env OMP_NUM_THREADS=$((cores < 8 ? cores : 8)) triad-bench rlhf --set device=cuda --ranks 1 \
  --stages 0,3
step profile_kernels 240 gpu "$kit/profile_kernels.py" "$out/kernels.md"
# triad's step at batch 16, 32 and 64 beside PyTorch's (eager, torch.compile) on this card;
# reads the kernel families profile_kernels wrote (OUT/kernels.json). speed.md in OUT.
step speed_step 330 gpu "$kit/speed_step.py" --kit "$kit" --out "$out"
step collectives_nccl 180 gpu "$kit/tests/check_collectives.sh" nccl 1 "${mpi[@]}" -np 1 \
  triad-bench collectives --comm nccl --min-bytes 8 --max-bytes 256M --warmup 5 --iters 20

# --- the training step's features on the GPU against the CPU (step_checks.py)
step zeropp_cuda 240 gpu env OMP_NUM_THREADS=$((cores / 4 > 0 ? cores / 4 : 1)) "$kit/step_checks.py" zeropp \
  --kit "$kit" --work "$work/step_checks" --steps 30
step adam_l2_curves 180 gpu env OMP_NUM_THREADS="$cores" "$kit/step_checks.py" adam_l2 --kit "$kit" \
  --work "$work/step_checks" --steps 30
step flops_profiler_cuda 120 gpu env OMP_NUM_THREADS="$cores" "$kit/step_checks.py" flops_profiler --kit "$kit" \
  --work "$work/step_checks"
step step_sync 240 gpu env OMP_NUM_THREADS="$cores" "$kit/step_checks.py" step_sync --kit "$kit" \
  --work "$work/step_checks" --steps 60
step recorded_steps 240 gpu env OMP_NUM_THREADS="$cores" "$kit/step_checks.py" recorded_steps --kit "$kit" \
  --work "$work/step_checks" --steps 60

# The MoE GPT (configs/moe-demo.json: top-2 of 4 experts every second block, capacity factor
# 1, some choices dropped) with its routing, token permutation and experts on the GPU,
# against the CPU; then its step time against the dense GPT's.
step moe_curves 240 gpu env OMP_NUM_THREADS="$cores" "$kit/compare_curves.py" --kit "$kit" --work "$work/moe_curves" \
  --config moe-demo.json --steps 50
step bench_moe_cuda 210 gpu triad-bench moe --device cuda --model gpt2-124m --experts 8 --batch 8 --seq 1024 --compare-loop

# Decoding with CUDA graphs against plain launches (Note [Decode graphs]): GPT-2 124M at
# batch 1 and 16, greedy and sampled with a fixed seed: equal tokens, and tokens/s of both.
step decode_graphs 240 gpu "$kit/decode_graphs.py"

# ZeRO-Offload (offload_optimizer cpu: the optimizer's state and Adam on the host; at ZeRO-3
# with offload_param cpu too, the parameter shards updated in place on the host, pinned and
# pageable; with ratio 0.5, half the state on the host) against the state in device memory:
# the demo model's curves, then GPT-2 124M's step times.
step offload_cpu 540 gpu env OMP_NUM_THREADS="$cores" "$kit/step_checks.py" offload_cpu --kit "$kit" \
  --work "$work/step_checks" --steps 30

# Quantized linear layers on the GPU: the integer GEMMs (W8A8, W4A8) in TOPS beside the f32
# and bf16 GEMMs of the same run, and W8A8 generation's tokens/s beside f32 and bf16 at
# batch 1 and 16 (GPT-2 124M, random weights); then a quantized model's greedy tokens on the
# GPU against the CPU's.
step bench_quantized_cuda 240 gpu triad-bench quantized --device cuda
step quantized_generate 180 gpu env OMP_NUM_THREADS="$cores" "$kit/quantized_generate.sh" "$kit" \
  "$work/quantized_generate"

# --- summary
python3 - "$results" "$logs" "$out" "${device_name:-none}" <<'EOF'
import json, os, sys
results, logs, out, device = sys.argv[1:]
FIGURES = ("mfu", "tokens_per_s", "step_ms_median", "device_peak_allocated_mib", "f32_cuda_vs_cpu", "bf16_vs_f32",
           "kernel_ms_per_step", "launches_per_step", "tp2_vs_tp1", "tp2_sp_vs_tp1", "model_state_mib_per_rank", "pp2_vs_pp1",
           "sft_cuda_vs_cpu", "reward_cuda_vs_cpu", "ppo_generation_fraction", "ppo_generation_tokens_per_s",
           "ppo_training_tokens_per_s", "generation_vs_training_per_token_max")
FIGURES += ("zeropp_cuda_vs_cpu", "adam_l2_cuda_vs_cpu", "step_sync_demo_ratio", "step_sync_gpt2_ratio")  # step_checks.py
FIGURES += ("graph_tokens_per_s_b1_greedy", "eager_tokens_per_s_b1_greedy", "graph_tokens_per_s_b16_sampled",
            "eager_tokens_per_s_b16_sampled")  # decode_graphs.py
FIGURES += ("moe_over_dense", "grouped_over_loop")  # bench_moe_cuda
FIGURES += ("offload_f32_vs_device", "offload_bf16_vs_device", "offload_step_ratio",
            "offload_delayed_step_ratio", "offload_z3_both_step_ratio",
            "offload_half_step_ratio")  # step_checks.py offload_cpu
FIGURES += ("w8a8_speedup", "w8a8_vs_bf16")  # triad-bench quantized
rows, steps = [], {}
for line in open(results):
    name, result, seconds, note = line.rstrip("\n").split("\t")
    last = None
    path = os.path.join(logs, name + ".log")
    if os.path.exists(path):
        lines = [l for l in open(path, errors="replace").read().splitlines() if l.strip()]
        if lines and lines[-1].startswith("{"):
            try: last = json.loads(lines[-1])
            except ValueError: pass
    steps[name] = {"result": result, "seconds": int(seconds), "note": note, "json": last}
    figures = ["%s %.4g" % (k, last[k]) for k in FIGURES if isinstance(last, dict) and isinstance(last.get(k), (int, float))]
    note = "; ".join([note] * bool(note) + figures)
    rows.append("| %s | %s | %s | %s |" % (name, result, seconds, note))
json.dump({"device": device, "steps": steps}, open(os.path.join(out, "results.json"), "w"), indent=1)
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("# GPU kit on %s\n\n| step | result | s | note |\n|---|---|---|---|\n" % device)
    f.write("\n".join(rows) + "\n")
EOF
python3 "$kit/targets.py" "$out/results.json" "$out/summary.md" >/dev/null
cp "$logs/machine.log" "$out/machine.log"
tar -C "$kit" -czf "$out/logs.tar.gz" logs
echo
cat "$out/summary.md"
echo
echo "$skipped skipped (results in $out: summary.md, results.json, logs.tar.gz)"
echo "$passed passed, $failed failed"
