// The NCCL communicator of a build without it (see cuda/nccl_communicator.h).
#include "cuda/nccl_communicator.h"

#include "tensor/error.h"

namespace triad::cuda {

bool nccl_built() { return false; }

parallel::CommunicatorPtr make_nccl_communicator(const parallel::CommunicatorPtr&, int) {
  throw Error(
      "this build of triad has no NCCL communicator (it needs the CUDA backend and NCCL: nccl.h and libnccl under "
      "the CUDA toolkit or NCCL_HOME)");
}

}  // namespace triad::cuda
