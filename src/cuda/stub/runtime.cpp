// The CUDA runtime of a build without the CUDA backend (see cuda/runtime.h).
#include "cuda/runtime.h"

#include "tensor/error.h"

namespace triad::cuda {

namespace {

[[noreturn]] void no_backend() {
  throw Error("this build of triad has no CUDA backend (configure with TRIAD_CUDA=ON on a machine with nvcc)");
}

}  // namespace

bool built() { return false; }
int device_count() { return 0; }
std::string describe_devices() { no_backend(); }
DeviceProperties device_properties(int) { no_backend(); }
void synchronize(int) { no_backend(); }
MemoryStats memory_stats(int) { no_backend(); }
void reset_peak_memory_stats(int) { no_backend(); }

}  // namespace triad::cuda
