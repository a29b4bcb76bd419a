// Activation checkpointing: run a segment without storing its intermediate activations and
// recompute them during the backward pass. Memory for the segment falls to its inputs and
// outputs; compute rises by one extra forward of the segment.
//
// The segment's random draws (dropout) are replayed exactly: the states of both generators (tensor/random.h)
// are saved before the forward and restored for the recomputation. Parameters used inside the
// segment receive their gradients during the recomputed segment's own backward.
#pragma once

#include <functional>

#include "tensor/tensor.h"

namespace triad {

using Segment = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

std::vector<Tensor> checkpoint(const Segment& segment, const std::vector<Tensor>& inputs);

inline Tensor checkpoint(const std::function<Tensor(const Tensor&)>& segment, const Tensor& input) {
  return checkpoint([segment](const std::vector<Tensor>& in) { return std::vector<Tensor>{segment(in[0])}; },
                    {input})[0];
}

}  // namespace triad
