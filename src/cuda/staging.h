// The CUDA side of Note [Staged collectives] (parallel/staged_collectives.h): host buffers
// in pinned memory (pinned.h), and copies on the device's communication stream ordered by
// events (Note [Streams]). cuda::runtime()'s install registers it for DeviceType::cuda, so
// MpiCommunicator takes tensors on CUDA devices.
#pragma once

#include "parallel/staged_collectives.h"

namespace triad::cuda {

// The staging of CUDA tensors through pinned host memory (created on first use, never
// destroyed).
parallel::DeviceStaging& host_staging();

}  // namespace triad::cuda
