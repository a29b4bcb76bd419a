# Source this file (bash) to use the unpacked kit's programs by hand: the kit's Open MPI, PMIx
# and libraries first, the CUDA toolkit's libraries and NCCL from this machine, `mpirun`,
# `triad-train` and the rest on PATH. run.sh sources it too. Sets `kit` and exports
# TRIAD_GPU_KIT (this folder); defines `kit_elf_files` (the kit's programs and plugins) and
# `kit_unresolved` (what ldd cannot resolve among their libraries).
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export TRIAD_GPU_KIT=$kit
export OPAL_PREFIX=$kit/ompi PMIX_PREFIX=$kit/pmix PMIX_MCA_mca_base_component_path=$kit/pmix/lib/pmix
export PATH=$kit/ompi/bin:$kit/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_base_warn_component_unused=0 OMP_WAIT_POLICY=PASSIVE
# A machine's own PMIx plugins (another build) may be found too: they fail to load, harmlessly.
export PMIX_MCA_pcompress_base_silence_warning=1
export LD_LIBRARY_PATH=$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

kit_elf_files() { find "$TRIAD_GPU_KIT/bin" "$TRIAD_GPU_KIT/tests" "$TRIAD_GPU_KIT/ompi" -type f \( -perm -u+x -o -name '*.so' \) ! -name '*.sh'; }
kit_unresolved() { kit_elf_files | xargs -n 1 ldd 2>&1 | grep -E 'not found' | sort -u; }

# The CUDA toolkit's libraries and NCCL come from this machine: from the loader's own paths,
# else from the usual CUDA folders or the Python packages that carry them (nvidia/*/lib).
kit_cuda_dirs() {
  ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/*/lib /usr/local/nvidia/lib64 \
    /usr/local/nvidia/lib /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib 2>/dev/null
  command -v python3 >/dev/null &&
    python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null |
    while read -r sp; do ls -d "$sp"/nvidia/*/lib 2>/dev/null; done
}
for soname in $(kit_unresolved | awk '$2 == "=>" && $3 == "not" { print $1 }' | sort -u); do
  for dir in $(kit_cuda_dirs); do
    if [[ -e $dir/$soname ]]; then
      [[ :$LD_LIBRARY_PATH: == *:$dir:* ]] || export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$dir
      break
    fi
  done
done
# libstdc++ and libgcc_s of the build, only where this machine's are older.
if kit_unresolved | grep -qE "version .(GLIBCXX|CXXABI|GCC)_"; then
  export LD_LIBRARY_PATH=$kit/lib:$kit/lib/compat:${LD_LIBRARY_PATH#"$kit/lib:"}
fi
