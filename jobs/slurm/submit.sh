#!/usr/bin/env bash
# Submits a job of this folder with the resources of settings.sh (nodes, tasks per node,
# CPUs per task, GPUs per node, time, partition, account) and hands it the settings as
# they are now:
#
#   jobs/slurm/submit.sh JOB [sbatch options...]
#     JOB: train, scaling-weak, scaling-strong, zero-compare or collectives
#   jobs/slurm/submit.sh train --job-name gpt-small      # its runs/gpt-small/ckpt: resubmit to continue
#   jobs/slurm/submit.sh zero-compare --wait             # sbatch's options come last and win
#
# Slurm's own output goes to RUNS/<job name>/slurm-<job id>.out; the job's folder is
# RUNS/<job name>/<job id>/. TRIAD_SLURM_SETTINGS=FILE reads FILE instead of settings.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

if (($# < 1)); then
  echo "usage: $0 JOB [sbatch options...]  (JOB: train, scaling-weak, scaling-strong, zero-compare, collectives)" >&2
  exit 2
fi
job=${1##*/}
job=${job%.sbatch}
shift
script=$here/$job.sbatch
if [[ ! -f $script ]]; then
  echo "error: no job '$job' ($script does not exist)" >&2
  exit 2
fi
settings=${TRIAD_SLURM_SETTINGS:-$here/settings.sh}
# shellcheck source=settings.sh
source "$settings"

options=(--nodes="$NODES" --ntasks-per-node="$TASKS_PER_NODE" --time="$TIME")
[[ -z $CPUS_PER_TASK ]] || options+=(--cpus-per-task="$CPUS_PER_TASK")
((GPUS_PER_NODE == 0)) || options+=(--gpus-per-node="$GPUS_PER_NODE")
[[ -z $PARTITION ]] || options+=(--partition="$PARTITION")
[[ -z $ACCOUNT ]] || options+=(--account="$ACCOUNT")
read -r -a extra <<<"$SBATCH_OPTIONS"
options+=("${extra[@]}")

# The job's name (the script's, unless the options give one) names its output folder, which
# must exist before Slurm opens its output file there.
name=$(sed -n 's/^#SBATCH --job-name=//p' "$script")
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    -J | --job-name) name=${args[i + 1]:-} ;;
    -J?*) name=${args[i]#-J} ;;
    --job-name=*) name=${args[i]#--job-name=} ;;
  esac
done
runs=$RUNS
[[ $runs == /* ]] || runs=$root/$runs
mkdir -p "$runs/$name"
options+=(--output="$runs/$name/slurm-%j.out")

# The job reads the settings from its environment: later edits of the file leave it alone.
TRIAD_SLURM_SETTINGS_TEXT=$(<"$settings")
export TRIAD_SLURM_SETTINGS_TEXT TRIAD_ROOT=$root
cd "$root"
exec sbatch "${options[@]}" "$@" "$script"
