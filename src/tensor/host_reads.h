// How many times this process has read tensor values on the host: Tensor::item and
// Tensor::to_vector, whatever the tensor's device. On a GPU each read of a device tensor
// makes the host wait for the device; tests count a training step's reads on the CPU, where
// the same code reads the same values (Note [Host synchronisation in a step] in
// train/trainer.cpp).
#pragma once

#include <cstdint>

namespace triad {

uint64_t host_reads();

}  // namespace triad
