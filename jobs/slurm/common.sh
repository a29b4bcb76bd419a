# shellcheck shell=bash
# Sourced by the .sbatch scripts of this folder at the start of a job: reads the settings,
# works out the ranks and OpenMP threads from the allocation, makes the job's folder
# RUNS/<job name>/<job id>/ and copies everything the job prints into its job.log.
# Expects root (the repository). Defines ranks, threads, run_dir, job_dir, mpirun_cmd (an
# array: mpirun and its options; the program follows), bench_model (the benchmarks' --model,
# or --config and --set options), words_of (splits a setting into an array) and rank_counts
# (the default scaling rank counts).

if [[ -z ${SLURM_JOB_ID:-} ]]; then
  echo "error: this is a Slurm batch script; submit it with jobs/slurm/submit.sh or sbatch" >&2
  exit 2
fi

# The settings: as submit.sh froze them, else the file (TRIAD_SLURM_SETTINGS or settings.sh).
if [[ -n ${TRIAD_SLURM_SETTINGS_TEXT:-} ]]; then
  eval "$TRIAD_SLURM_SETTINGS_TEXT"
else
  # shellcheck source=settings.sh
  source "${TRIAD_SLURM_SETTINGS:-$root/jobs/slurm/settings.sh}"
fi

# words_of NAME "TEXT": the array NAME holds TEXT's whitespace-separated words.
words_of() { read -r -a "$1" <<<"$2"; }

# rank_counts N: 1, 2, 4, ... below N, and N (comma-separated).
rank_counts() {
  local n=1 out=""
  while ((n < $1)); do
    out+="$n,"
    n=$((n * 2))
  done
  echo "$out$1"
}

# "4(x2),3" -> 4: the first node's count in Slurm's compressed per-node lists.
first_count() {
  local first=${1%%,*}
  echo "${first%%(*}"
}

ranks=${RANKS:-${SLURM_NTASKS:-1}}
if [[ -n $RANKS ]]; then
  nodes=${SLURM_JOB_NUM_NODES:-1}
  ranks_here=$(((ranks + nodes - 1) / nodes))
else
  ranks_here=$(first_count "${SLURM_TASKS_PER_NODE:-$ranks}")
fi
if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
  threads=$SLURM_CPUS_PER_TASK
else
  cores_here=$(first_count "${SLURM_JOB_CPUS_PER_NODE:-${SLURM_CPUS_ON_NODE:-1}}")
  threads=$((cores_here / ranks_here))
fi
((threads >= 1)) || threads=1
export OMP_NUM_THREADS=$threads

[[ $RUNS == /* ]] || RUNS=$root/$RUNS
[[ $BIN == /* ]] || BIN=$root/$BIN
run_dir=$RUNS/$SLURM_JOB_NAME
job_dir=$run_dir/$SLURM_JOB_ID
mkdir -p "$job_dir"
# The settings the job ran with (a requeued job rewrites the same text).
if [[ -n ${TRIAD_SLURM_SETTINGS_TEXT:-} ]]; then
  printf '%s\n' "$TRIAD_SLURM_SETTINGS_TEXT" >"$job_dir/settings.sh"
else
  cp "${TRIAD_SLURM_SETTINGS:-$root/jobs/slurm/settings.sh}" "$job_dir/settings.sh"
fi
# Everything from here on also goes to the job's folder (appended: a requeued job adds to it).
exec > >(tee -a "$job_dir/job.log") 2>&1
tee_pid=$!
# At the end, tee writes out the last lines before Slurm ends the job's remaining processes.
trap 'exec >&- 2>&-; wait "$tee_pid" 2>/dev/null || true' EXIT

words_of mpirun_options "$MPIRUN_OPTIONS"
mpirun_cmd=(mpirun -np "$ranks" -x OMP_NUM_THREADS "${mpirun_options[@]}")
if ((OVERSUBSCRIBE)); then
  mpirun_cmd+=(--oversubscribe)
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}  # ranks sharing cores: no spinning waits
  mpirun_cmd+=(-x OMP_WAIT_POLICY)
fi

if [[ -n $BENCH_CONFIG ]]; then
  bench_model=(--config "$BENCH_CONFIG")
  [[ $BENCH_CONFIG == /* ]] || bench_model[1]=$root/$BENCH_CONFIG
  words_of bench_sets "$BENCH_SETS"
  for s in "${bench_sets[@]}"; do bench_model+=(--set "$s"); done
else
  bench_model=(--model "$BENCH_MODEL")
fi

echo "==== $(date -Is) job $SLURM_JOB_ID ($SLURM_JOB_NAME), restart ${SLURM_RESTART_COUNT:-0}," \
  "${SLURM_JOB_NUM_NODES:-1} node(s) ${SLURM_JOB_NODELIST:-}, $ranks ranks, $threads threads per rank"
echo "==== output: $job_dir"
