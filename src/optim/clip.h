// Global-norm gradient clipping, the one implementation every optimizer path uses: SGD in
// one process (clip_grad_norm) and ZeRO over a process grid (zero/zero_optimizer.h), whose
// gradients are spread over many ranks.
//
// Across ranks, the norm is of the whole model's gradient: each element counted once. A
// rank hands global_grad_norm its gradients in parts, counted or not (a copy of elements
// another rank counts: a replicated parameter under tensor parallelism), and the caller's
// function sums the rank's squares over the ranks holding the rest (the collectives stay
// with the caller: optim knows nothing of communicators). An inf or NaN in any part, counted
// or not, makes the rank's sum non-finite, and so every rank's norm once it is summed: one
// verdict everywhere (the overflow test of dynamic loss scaling, optim/loss_scaler.h).
#pragma once

#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace triad::optim {

// Gradients on one device whose squares a rank adds to the global norm. counted = false:
// copies of elements another rank counts; they add nothing unless they hold an inf or NaN.
struct NormPart {
  std::vector<Tensor> grads;
  bool counted = true;
};

// Sums a rank's partial sum of squares over the ranks holding the rest of the model; every
// rank gets the same total. Empty: one process (the partial sum is the total).
using SumOverRanks = std::function<double(double)>;

// The L2 norm of all gradients together: each part's squares summed in double (in order,
// part by part), then over ranks. Non-finite when any element of any part on any rank is.
double global_grad_norm(const std::vector<NormPart>& parts, const SumOverRanks& sum_over_ranks = {});
// The factor gradients of norm `norm` are multiplied by to clip them to max_norm:
// max_norm / (norm + 1e-6) when that is below 1 (PyTorch's rule), else 1; max_norm 0: off (1).
double clip_coefficient(double norm, double max_norm);
// Multiplies every gradient by clip_coefficient(norm, max_norm) when that is below 1.
void clip_grads(const std::vector<Tensor>& grads, double norm, double max_norm);

// One process: the norm of the gradients of `params` (those that have one).
double grad_norm(const std::vector<Tensor>& params);
// One process: clips the gradients of `params` to max_norm (> 0); returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace triad::optim
