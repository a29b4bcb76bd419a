// The NCCL backend of `triad-bench collectives` in a build without CUDA or NCCL (see
// bench/collectives_backend.h; the backend itself is bench/collectives_nccl.cu).
#include "bench/collectives_backend.h"
#include "tensor/error.h"

namespace triad::bench::collectives {

std::unique_ptr<Backend> make_nccl_backend(const parallel::CommunicatorPtr&, DType) {
  throw Error(
      "--comm nccl: this build of triad has no NCCL (it needs the CUDA backend and NCCL: nvcc at configure time, "
      "and nccl.h and libnccl under the CUDA toolkit or NCCL_HOME)");
}

}  // namespace triad::bench::collectives
