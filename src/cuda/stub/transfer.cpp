// The host-device transfers of a build without the CUDA backend (see cuda/transfer.h): no
// tensor can live on a CUDA device here, so every crossing is an error that says why.
#include "cuda/transfer.h"

namespace triad::cuda {

namespace {

// `where`: the CUDA device of the crossing, where the op names one.
[[noreturn]] void no_backend(const Tensor& t, const char* op, const std::string& where = "a CUDA device") {
  throw Error(std::string(op) + ": " + t.str() + " cannot cross to or from " + where +
              ": this build of triad has no CUDA backend (configure with TRIAD_CUDA=ON on a machine with nvcc)");
}

}  // namespace

void copy_to_device(const Tensor&, const Tensor& src) { no_backend(src, "copy_to_device"); }
void copy_to_host(const Tensor&, const Tensor& src) { no_backend(src, "copy_to_host"); }
Tensor to_device(const Tensor& t, Device device) { no_backend(t, "to_device", device.str()); }
Tensor to_host(const Tensor& t) { no_backend(t, "to_host"); }

}  // namespace triad::cuda
