#!/usr/bin/env bash
# scripts/gpu-kit pack: builds triad for Hopper (sm_90) in .gpu-kit/build and packs
# .gpu-kit/triad-gpu-kit.tar.xz (at most 40 MiB) with its manifest beside it. See README.md
# in this folder for the layout of the kit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
kit=$root/.gpu-kit
build=$kit/build
stage=$kit/stage/triad-gpu-kit
archive=$kit/triad-gpu-kit.tar.xz
max_bytes=$((40 * 1024 * 1024))
jobs=${JOBS:-$(nproc)}
multiarch=$(gcc -print-multiarch)
syslib=/usr/lib/$multiarch

"$root/scripts/setup-deps.sh"
command -v nvcc >/dev/null || { echo "gpu-kit pack: nvcc not found: the kit needs the CUDA toolkit to build" >&2; exit 1; }

# --- build: Hopper only, portable CPU code, no build-tree run paths (the kit sets its own)
mkdir -p "$kit"
echo "gpu-kit pack: building in ${build#"$root"/}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DTRIAD_NATIVE=OFF -DCMAKE_SKIP_RPATH=ON >"$kit/configure.log" ||
  { cat "$kit/configure.log" >&2; exit 1; }
grep -q "NCCL communicator ON" "$kit/configure.log" ||
  { echo "gpu-kit pack: NCCL not found at configure time (set NCCL_HOME); the kit needs it" >&2; exit 1; }
programs=(triad-train triad-bench triad-generate triad-data triad-ckpt triad-rlhf bench-cublaslt)
programs+=(triad-compress)  # quantized_generate.sh
mapfile -t gpu_tests < <(cd "$root/tests/cuda" && ls test_*_cuda.cpp test_*_cuda_mpi.cpp | sed 's/\.cpp$//')
cmake --build "$build" -j "$jobs" --target "${programs[@]}" "${gpu_tests[@]}"

# --- stage
rm -rf "$kit/stage"
mkdir -p "$stage"/{bin,tests,lib/compat,data,configs}
for p in "${programs[@]}"; do cp "$build/bin/$p" "$stage/bin/"; done
# One line per GPU test: its name and the rank counts to run it with on one GPU (none: no
# mpirun; a test whose ranks may share a GPU runs on 1, 2 and 4; one that needs a GPU per
# rank on 1).
for t in "${gpu_tests[@]}"; do
  cp "$build/tests/$t" "$stage/tests/"
  if [[ $t != *_mpi ]]; then ranks=-
  elif grep -q TRIAD_SHARED_GPU_MPI_TEST_MAIN "$root/tests/cuda/$t.cpp"; then ranks=1,2,4
  else ranks=1; fi
  echo "$t $ranks"
done >"$stage/tests/gpu-tests.txt"
cp "$root/tests/apps/check_collectives.sh" "$stage/tests/"
cp "$root"/configs/*.json "$stage/configs/"
cp "$here/run.sh" "$here/env.sh" "$here/compare_curves.py" "$here/profile_kernels.py" "$here/tp_curves.py" "$here/pp_curves.py" "$here/rlhf_curves.py" "$here/README.md" "$stage/"
cp "$here/speed_step.py" "$here/targets.py" "$here/step_checks.py" "$root/benchmarks/peers/torch_gpt2_step.py" "$stage/"
cp "$here/decode_graphs.py" "$stage/"
cp "$here/quantized_generate.sh" "$stage/"

# The demo corpus, tokenized by the kit's own triad-data, and its preference pairs (rlhf_curves).
corpus=/usr/share/games/fortunes
"$stage/bin/triad-data" tokenizer --corpus "$corpus" --separator % --vocab-size 2048 \
  --out "$stage/data/tokenizer.json" >/dev/null
"$stage/bin/triad-data" encode --tokenizer "$stage/data/tokenizer.json" --corpus "$corpus" --separator % \
  --out "$stage/data/tokens.bin" >/dev/null
"$stage/bin/triad-data" pairs --corpus "$corpus" --separator % --out "$stage/data/pairs.jsonl" >/dev/null

# Open MPI, relocatable through OPAL_PREFIX: its tree mirrored under ompi/ (programs,
# plugins, help files). Plugins for networks a one-node machine lacks (UCX, libfabric, PSM,
# verbs) are left out with the libraries they would pull in.
ompi=$stage/ompi
ompi_pkglibdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
ompi_prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
mkdir -p "$ompi/bin" "$ompi/${ompi_pkglibdir#"$ompi_prefix"/}" "$ompi/share"
cp "$(readlink -f "$(command -v orterun)")" "$ompi/bin/orterun"
cp "$(readlink -f "$(command -v orted)")" "$ompi/bin/orted"
ln -s orterun "$ompi/bin/mpirun"
cp -r "$ompi_prefix/share/openmpi" "$ompi/share/"
network='lib(uc[mpst]|fabric|psm|psm2|psm_infinipath|ibverbs|rdmacm)\.so'
skipped_plugins=()
for plugin in "$ompi_pkglibdir"/*.so; do
  if ldd "$plugin" | grep -qE "$network"; then skipped_plugins+=("$(basename "$plugin")"); continue; fi
  cp "$plugin" "$ompi/${ompi_pkglibdir#"$ompi_prefix"/}/"
done
# PMIx (Open MPI's process manager interface), relocatable through PMIX_PREFIX.
pmix_prefix=$syslib/pmix2
mkdir -p "$stage/pmix/lib"
cp -r "$pmix_prefix/lib/pmix" "$stage/pmix/lib/"
cp -r "$pmix_prefix/share" "$stage/pmix/"

# --- libraries: every one the kit's programs and plugins load, except those a GPU machine
# has: the C library's, the CUDA driver's and the CUDA toolkit's (with NCCL). libstdc++ and
# libgcc_s go to lib/compat, used only where the machine's own are older than the build's.
glibc='^(ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|libBrokenLocale|libthread_db|libnss_[a-z]+)\.so'
image_path='^(/usr/local/cuda|/usr/lib/[^/]+/libcuda\.so|/usr/lib/[^/]+/libnvidia-)'
declare -A bundled=() from_image=()
missing=()
while read -r name path; do
  [[ $name =~ $glibc || $name == linux-vdso.so.1 ]] && continue
  if [[ $path == "not" ]]; then missing+=("$name"); continue; fi
  if [[ $path =~ $image_path || $name =~ ^lib(cuda|nccl|cudart|cublas|cublasLt)\.so ]]; then
    from_image[$name]=$path; continue
  fi
  bundled[$name]=$path
done < <(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
  xargs -0 -n 1 ldd 2>/dev/null | awk '$2 == "=>" { print $1, $3 }' | sort -u)
((${#missing[@]} == 0)) || { echo "gpu-kit pack: libraries not found on this machine: ${missing[*]}" >&2; exit 1; }
for name in "${!bundled[@]}"; do
  case $name in
    libstdc++.so.*|libgcc_s.so.*) cp -L "${bundled[$name]}" "$stage/lib/compat/$name" ;;
    *) cp -L "${bundled[$name]}" "$stage/lib/$name" ;;
  esac
done

# --- manifest
{
  echo "triad GPU kit"
  echo "commit: $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "build: Release, CUDA architectures 90, TRIAD_NATIVE=OFF; $(nvcc --version | tail -1)"
  echo
  echo "expected on the GPU machine (CUDA driver and toolkit, NCCL, the C library):"
  for name in "${!from_image[@]}"; do echo "  $name (here: ${from_image[$name]})"; done | sort
  echo
  echo "Open MPI plugins left out (networks a one-node machine lacks): ${skipped_plugins[*]:-none}"
  echo
  echo "files:"
  (cd "$kit/stage" && find triad-gpu-kit -type f -printf '  %-72p %10s\n' | sort)
} >"$stage/MANIFEST.txt"
cp "$stage/MANIFEST.txt" "$kit/MANIFEST.txt"

# The programs share most of their bytes (each links triad's layers, kernels included): with
# a dictionary larger than the whole stream xz finds each program's copy of them in the ones
# before it (57 MiB at xz -6, 25 MiB so; one thread, since threads would compress blocks
# that cannot see each other). Unpacking takes 256 MiB of memory.
tar -C "$kit/stage" -cf - triad-gpu-kit | xz -T 1 --lzma2=preset=9,dict=256MiB >"$archive.tmp"
mv "$archive.tmp" "$archive"
size=$(stat -c %s "$archive")
echo "gpu-kit pack: ${archive#"$root"/} ($((size / 1024 / 1024)) MiB, $(grep -c '^  triad-gpu-kit/' "$kit/MANIFEST.txt") files; manifest: ${kit#"$root"/}/MANIFEST.txt)"
if ((size > max_bytes)); then
  echo "gpu-kit pack: the archive is over 40 MiB: it would not travel with the working tree" >&2
  exit 1
fi
