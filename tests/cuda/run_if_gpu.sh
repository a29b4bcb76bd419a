#!/bin/sh
# Runs a GPU test under mpirun (tests/CMakeLists.txt: `run_if_gpu.sh mpirun ... program`),
# or, on a machine with no NVIDIA GPU device at all, skips it at once with the exit code
# CTest reads as skipped (77): the program itself would skip too (gpu_test_main.h), but only
# after mpirun had started every rank, seconds a test. Where a device node exists, the
# program decides.
if ! ls /dev/nvidia[0-9]* /dev/dxg >/dev/null 2>&1; then
  echo "no NVIDIA GPU device (/dev/nvidia*): skipped"
  exit 77
fi
exec "$@"
