#include "cuda/error.h"

#include <string>

#include "parallel/runtime.h"
#include "tensor/error.h"

namespace triad::cuda::detail {

void throw_error(const char* library, const char* message, const char* call, const char* file, int line) {
  throw Error(std::string(library) + " error at " + file + ":" + std::to_string(line) + " (rank " +
              std::to_string(parallel::world_rank()) + "): " + message + " (" + call + ")");
}

}  // namespace triad::cuda::detail
