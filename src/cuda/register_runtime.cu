// Registers the CUDA runtime with the tensor layer while the program loads, before main
// (tensor/device_runtime.h): the tensor layer never includes CUDA's headers. Nothing
// references this file, so it is linked into every program that links triad as an object,
// not from the archive, which would leave it out (cmake/layers.cmake).
#include "cuda/runtime.h"

namespace {

[[maybe_unused]] const bool registered = (triad::register_device_runtime(triad::DeviceType::cuda, &triad::cuda::runtime()), true);

}  // namespace
