// Reverse-mode differentiation over the tape.
#pragma once

#include "tensor/tensor.h"

namespace triad {

// Back-propagates from `root`. grad_root defaults to 1 for a one-element root. Gradients
// accumulate into the .grad of every leaf that requires grad. Unless retain_graph, each
// node drops its saved tensors once it has run, so memory falls as the pass proceeds.
// Reentrant: a node may itself run a backward pass (activation checkpointing does).
void backward(const Tensor& root, const Tensor& grad_root = Tensor(), bool retain_graph = false);

// Several roots at once, each with its gradient (same shapes as the roots).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph = false);

}  // namespace triad
