#!/usr/bin/env bash
# check_collectives_nccl.sh MPIEXEC TRIAD_BENCH [OPTIONS...]: `triad-bench collectives --comm
# nccl OPTIONS` under MPIEXEC with one rank per visible GPU (NCCL needs a GPU per rank; at
# most 8 ranks), checked by check_collectives.sh. Without a GPU it prints why and exits 77,
# which CTest reports as skipped.
set -u
mpiexec=$1 bench=$2
shift 2
# The visible GPUs: CUDA_VISIBLE_DEVICES's entries when it is set (empty: none), else the
# GPUs nvidia-smi lists (none without a driver).
if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
  IFS=, read -ra visible <<<"$CUDA_VISIBLE_DEVICES"
  gpus=${#visible[@]}
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
if [[ $gpus -eq 0 ]]; then
  echo "no CUDA device: skipped"
  exit 77
fi
ranks=$((gpus < 8 ? gpus : 8))
exec "$(dirname "$0")/check_collectives.sh" nccl "$ranks" \
  "$mpiexec" -np "$ranks" --oversubscribe --bind-to none "$bench" collectives --comm nccl "$@"
