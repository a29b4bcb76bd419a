// The conjugate functions of tensor parallelism (Megatron-LM's f and g): differentiable
// collectives over a tensor-parallel group that move activations into and out of the
// region where each rank holds its own part of the features (or, with sequence
// parallelism, of the tokens). Each is the other's transpose: what one does forward, its
// conjugate does backward.
//
//   copy_to_tp_region             forward: identity           backward: all-reduce
//   reduce_from_tp_region         forward: all-reduce         backward: identity
//   split_to_tp_region            forward: own slice of dim -1  backward: all-gather dim -1
//   gather_from_tp_region         forward: all-gather dim -1  backward: own slice of dim -1
//   scatter_to_sequence_region    forward: own slice of T     backward: all-gather T
//   gather_from_sequence_region   forward: all-gather T       backward: reduce-scatter T
//   reduce_scatter_to_sequence_region  forward: reduce-scatter T  backward: all-gather T
//   gather_to_replicated_sequence forward: all-gather T       backward: own slice of T
//
// The last is scatter_to_sequence_region's conjugate for a region where every rank computes
// the same thing on the whole sequence (MoE layers under sequence parallelism): its gradient
// comes back whole and equal on every rank, so each keeps its own tokens' part of it.
//
// T is dimension 1 of (B, T, ...) activations; rank r holds tokens [r·T/n, (r+1)·T/n).
// The last dimension's slices are likewise contiguous per rank. Every rank of the group
// calls the same functions in the same order on tensors of the same shape (a shape that
// n does not divide throws Error on every rank before any communication). On a group of
// one rank each returns its input.
#pragma once

#include "parallel/communicator.h"
#include "tensor/tensor.h"

namespace triad::parallel {

Tensor copy_to_tp_region(const Tensor& x, const CommunicatorPtr& tp);
Tensor reduce_from_tp_region(const Tensor& x, const CommunicatorPtr& tp);
Tensor split_to_tp_region(const Tensor& x, const CommunicatorPtr& tp);
Tensor gather_from_tp_region(const Tensor& x, const CommunicatorPtr& tp);
Tensor scatter_to_sequence_region(const Tensor& x, const CommunicatorPtr& tp);
Tensor gather_from_sequence_region(const Tensor& x, const CommunicatorPtr& tp);
Tensor reduce_scatter_to_sequence_region(const Tensor& x, const CommunicatorPtr& tp);
Tensor gather_to_replicated_sequence(const Tensor& x, const CommunicatorPtr& tp);

// The raw collectives they are made of (no gradient), on any tensor.
namespace tp_ops {
Tensor all_reduce(const Tensor& x, Communicator& tp);
Tensor all_gather_last(const Tensor& x, Communicator& tp);  // (..., c) -> (..., n c)
Tensor slice_last(const Tensor& x, Communicator& tp);       // (..., n c) -> (..., c), own slice
Tensor all_gather_seq(const Tensor& x, Communicator& tp);   // (B, t, ...) -> (B, n t, ...)
Tensor reduce_scatter_seq(const Tensor& x, Communicator& tp);  // (B, n t, ...) -> (B, t, ...)
Tensor slice_seq(const Tensor& x, Communicator& tp);        // (B, n t, ...) -> (B, t, ...), own slice
}  // namespace tp_ops

}  // namespace triad::parallel
