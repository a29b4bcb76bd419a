#!/usr/bin/env bash
# Installs the Debian packages triad needs to build, test and run its default job.
# Idempotent: packages already present are left alone, and nothing runs when all are there.
# Works as root or through sudo.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  lld                    # the linker: programs link in a third of ld.bfd's time (CMakeLists.txt)
  libeigen3-dev          # CPU GEMM and vector math
  libboost-test-dev      # unit tests
  libbenchmark-dev       # micro benchmarks
  libcli11-dev           # command lines
  nlohmann-json3-dev     # configs and benchmark output
  fortunes               # the default training corpus (plain English, a few MB)
  openmpi-bin libopenmpi-dev  # the data-parallel transport (mpirun, MPI)
  libopenblas-openmp-dev # the BLAS behind Eigen's GEMM (OpenMP build: one thread pool with ours)
  libhdf5-openmpi-dev hdf5-tools  # checkpoints: parallel HDF5 over Open MPI, and h5dump to inspect them
  libaio-dev             # offload: asynchronous direct I/O of optimizer state to NVMe (io/swap_file.h)
  gnuplot-nox            # figures: triad-bench scaling's PNG, scripts/plot-metrics (gnuplot without X)
  python3                # the app tests read programs' JSON output with it (standard library only)
)

find_missing() {
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
}
find_missing
((${#missing[@]} == 0)) && exit 0

if [[ $(id -u) -eq 0 ]]; then sudo=(); else sudo=(sudo); fi
echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
wanted=("${missing[@]}")
if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  # apt-get can exit non-zero after installing everything (a trigger's warning): what
  # counts is whether the packages are there.
  find_missing
  if ((${#missing[@]} == 0)); then
    echo "setup-deps: done (apt-get reported a failure, but every package is installed)"
    exit 0
  fi
  cat "$log" >&2
  echo "setup-deps: installing ${wanted[*]} failed; still missing: ${missing[*]} (output above)" >&2
  exit 1
fi
echo "setup-deps: done"
