// The CUDA runtime of a build without the CUDA backend (see cuda/runtime.h).
#include "cuda/runtime.h"

#include "tensor/error.h"

namespace triad::cuda {

bool built() { return false; }
int device_count() { return 0; }
std::string describe_devices() {
  throw Error("this build of triad has no CUDA backend (configure with TRIAD_CUDA=ON on a machine with nvcc)");
}
void install() {}

}  // namespace triad::cuda
