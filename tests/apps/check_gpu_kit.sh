#!/usr/bin/env bash
# check_gpu_kit.sh ROOT: the GPU kit stands alone. Packs it (scripts/gpu-kit pack), checks
# that the archive is under 40 MiB and that its manifest lists the programs, the GPU tests,
# Open MPI and the libraries, then unpacks it into an empty folder and, in a mount namespace
# where the system's Open MPI, PMIx, HDF5, OpenBLAS and every other library the kit bundles
# are hidden (empty files and folders mounted over them):
#   - every library the kit's programs and plugins load resolves inside the kit, or is the
#     C library's, libstdc++/libgcc_s, or the CUDA driver's or toolkit's (ldd);
#   - one training process runs without mpirun;
#   - the kit's run.sh, on this machine without a GPU, passes its two CPU steps (the
#     libraries, and a 2-rank training under the kit's own mpirun, the system's hidden),
#     skips every GPU step with a line saying so, and ends with its summary line.
set -euo pipefail
root=$(cd "$1" && pwd)
[[ $(id -u) -eq 0 ]] || { echo "needs root (unshare -m, mount): skipped"; exit 77; }

"$root/scripts/gpu-kit" pack
archive=$root/.gpu-kit/triad-gpu-kit.tar.xz
manifest=$root/.gpu-kit/MANIFEST.txt
size=$(stat -c %s "$archive")
((size < 40 * 1024 * 1024)) || { echo "FAIL: the archive is $size bytes, over 40 MiB"; exit 1; }
for f in bin/triad-train bin/triad-bench bin/bench-cublaslt speed_step.py torch_gpt2_step.py tests/test_train_cuda \
  tests/test_zero_cuda_mpi tests/gpu-tests.txt ompi/bin/orterun lib/libmpi.so.40 lib/libhdf5_openmpi.so.103 \
  lib/libopenblas.so.0 lib/libgfortran.so.5 data/tokens.bin run.sh env.sh; do
  grep -q "^  triad-gpu-kit/$f " "$manifest" || { echo "FAIL: the manifest does not list $f"; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/unpacked" "$work/empty"
tar -xJf "$archive" -C "$work/unpacked"
kit=$work/unpacked/triad-gpu-kit
: >"$work/empty-file"

# Inside the namespace: hide, then check and run. The libraries kept visible: the C
# library's, libstdc++ and libgcc_s, and the CUDA driver's and toolkit's.
cat >"$work/inside.sh" <<'EOF'
set -euo pipefail
work=$1 kit=$2
syslib=/usr/lib/$(gcc -print-multiarch)
for d in "$syslib"/openmpi "$syslib"/pmix2 "$syslib"/hdf5 "$syslib"/openblas-openmp /usr/share/openmpi /etc/openmpi; do
  [[ -d $d ]] && mount -t tmpfs none "$d"
done
for name in $(ls "$kit/lib"); do
  [[ -f $kit/lib/$name && -e $syslib/$name ]] && mount --bind "$work/empty-file" "$syslib/$name"
done
for p in orterun orted mpirun mpiexec; do
  [[ -e /usr/bin/$p ]] && mount --bind "$work/empty-file" "$(readlink -f /usr/bin/$p)"
done

. "$kit/env.sh"
allowed="^($kit/|/usr/local/cuda|/usr/lib/[^/]+/(libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so|/lib64/ld-linux|.*/lib(cuda|cudart|cublasLt|cublas|nccl)\.so)"
outside=$(kit_elf_files | xargs -n 1 ldd 2>/dev/null | awk '$2 == "=>" { print $3 } $1 ~ /^\// { print $1 }' |
  sed 's|^/lib/|/usr/lib/|' | sort -u | grep -vE "$allowed" || true)
if [[ -n $outside ]]; then echo "FAIL: libraries resolved outside the kit:"; echo "$outside"; exit 1; fi
echo "ldd: every library of the kit resolves inside it, or to the C library, libstdc++ or CUDA"

# One process without mpirun: Open MPI starts the kit's orted for it.
triad-train --config "$kit/configs/tiny.json" --set data.corpus="$kit/data/tokens.bin" \
  --set data.tokenizer="$kit/data/tokenizer.json" --set model.vocab_size=2048 --set output_dir="$work/single" \
  --steps 2 >"$work/single.log" 2>&1 || { echo "FAIL: a one-process run"; cat "$work/single.log"; exit 1; }
echo "one process without mpirun: trained"

env -i HOME="$HOME" PATH=/usr/bin:/bin "$kit/run.sh" "$work/out" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
EOF
unshare -m bash "$work/inside.sh" "$work" "$kit"

log=$work/run.log
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
[[ $(tail -n 1 "$log") == "2 passed, 0 failed" ]] || fail "the run did not end with '2 passed, 0 failed'"
grep -q "^PASSED libraries " "$log" || fail "the libraries step did not pass"
grep -q "^PASSED mpi_cpu_train " "$log" || fail "the 2-rank training under the kit's mpirun did not pass"
# A step per GPU test and rank count, and each GPU step run.sh names on a line of its own
# (benchmarks, curves, profiles, collectives).
own=$(grep -c '^step [a-z_0-9]* [0-9]* gpu ' "$kit/run.sh")
gpu_steps=$(awk -v own="$own" '{ n += $2 == "-" ? 1 : split($2, ranks, ",") } END { print n + own }' "$kit/tests/gpu-tests.txt")
skips=$(grep -c "^SKIP .*: no GPU on this machine (nvidia-smi lists none)$" "$log")
((skips == gpu_steps)) || fail "$skips GPU steps skipped with a reason, expected $gpu_steps"
for f in summary.md results.json machine.log logs.tar.gz; do
  [[ -s $work/out/$f ]] || fail "the run wrote no $f"
done
echo "OK: the kit ($((size / 1024 / 1024)) MiB) runs alone; $skips GPU steps skipped without a GPU"
