# Settings of the Slurm jobs in jobs/slurm/: the one place to edit. `jobs/slurm/submit.sh JOB`
# turns the resources into sbatch options and hands this whole file to the job, which keeps
# a copy as runs/<job name>/<job id>/settings.sh; editing it later does not change jobs
# already submitted. Paths are relative to the repository root. (A job submitted with plain
# `sbatch` reads this file when it starts and takes its resources from sbatch's options.)

# ---- resources ----
NODES=1                # nodes
TASKS_PER_NODE=2       # MPI ranks per node
CPUS_PER_TASK=         # cores (OpenMP threads) per rank; empty: the node's allocated cores / its ranks
GPUS_PER_NODE=0        # sbatch --gpus-per-node; 0: none requested (the config's "device" picks the GPU)
TIME=01:00:00          # time limit (train.sbatch requeues itself about two minutes before it)
PARTITION=             # empty: the cluster's default partition
ACCOUNT=               # empty: your default account
SBATCH_OPTIONS=""      # more sbatch options, e.g. "--exclusive --qos=high"

# ---- every job ----
RUNS=runs              # jobs write into RUNS/<job name>/<job id>/
BIN=build/bin          # the triad programs
RANKS=                 # empty: one rank per task (sbatch's tasks); more ranks need OVERSUBSCRIBE=1
OVERSUBSCRIBE=0        # 1: mpirun --oversubscribe (more ranks than the allocation has slots)
MPIRUN_OPTIONS="--bind-to none"  # unbound: a rank's OpenMP threads may use all of its cores

# ---- train.sbatch ----
CONFIG=configs/demo.json
SETS="train_micro_batch_size_per_gpu=4"  # --set overrides, space-separated key=value
CHECKPOINT_EVERY=100   # steps between checkpoints: where a requeued or resubmitted job resumes
TRAIN_OPTIONS=""       # more triad-train options, e.g. "--steps 5000"
REQUEUE_NEAR_LIMIT=1   # 1: near TIME the job requeues itself and goes on from its newest checkpoint

# ---- scaling-weak.sbatch, scaling-strong.sbatch, zero-compare.sbatch ----
BENCH_MODEL=tiny       # a preset: tiny, gpt2-124m, gpt2-350m
BENCH_CONFIG=          # a triad-train config instead of the preset (its model, optimizer, zero keys)
BENCH_SETS=""          # --set overrides of BENCH_CONFIG, space-separated key=value
BENCH_BATCH=8          # sequences per step: per rank in scaling-weak, global (divisible by the ranks) otherwise
BENCH_SEQ=64           # tokens per sequence
BENCH_STEPS=10         # timed steps per point
BENCH_WARMUP=2         # untimed steps first
SCALING_RANKS=         # comma-separated; empty: 1, 2, 4, ... up to the job's ranks, and the job's ranks
SCALING_STAGES=0,1,2,3
ZERO_STAGES=0,1,2,3    # zero-compare: these stages, each on all of the job's ranks

# ---- collectives.sbatch ----
COLLECTIVES_OPTIONS="--min-bytes 8 --max-bytes 64M"  # triad-bench collectives options
