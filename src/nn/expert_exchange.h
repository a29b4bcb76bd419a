// How the experts of a Mixture-of-Experts layer are spread over processes: the seam where
// expert parallelism plugs into nn::MoE, as parallel::TensorParallel implements
// nn::Parallelism. This header is the single-process case, which moves nothing.
#pragma once

#include <memory>

#include "tensor/tensor.h"

namespace triad::nn {

// Note [Expert parallelism]
// nn::MoE runs in three stages: dispatch writes this process's tokens into a buffer of
// slots (E, C, d), C slots per expert; the experts run on their slots; combine reads the
// outputs back into tokens, weighted by the gate. Under expert parallelism over ep ranks,
// rank r holds the E/ep experts [r E/ep, (r+1) E/ep) and an exchange runs between the
// stages: to_experts, an all-to-all over the ep group, sends block q of E/ep experts of
// the buffer to rank q, so that each rank gets, for each of its experts, the C slots every
// rank filled for it (E/ep, ep C, d); from_experts, the inverse all-to-all, returns the
// outputs to the ranks whose tokens they are. Each is the other's adjoint, so gradients
// flow back through them. In dropless mode the ranks first agree on one capacity, the
// largest over the group (DeepSpeed all-reduces it with MAX), so that the buffers match.
// The routing, the gate and the combine weights stay local to each rank.
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  // Processes the experts are spread over: each holds num_experts / ranks() of them.
  virtual int ranks() const { return 1; }
  // This process's place among them: it holds experts [rank E / ranks, (rank + 1) E / ranks).
  virtual int rank() const { return 0; }
  // The capacity every rank uses in dropless mode, given this rank's.
  virtual int64_t agree_capacity(int64_t capacity) const { return capacity; }
  // slots (E, C, d) of this process's tokens -> (E / ranks, ranks C, d) for its experts.
  virtual Tensor to_experts(const Tensor& slots) const { return slots; }
  // The inverse: the experts' outputs (E / ranks, ranks C, d) -> (E, C, d) of its tokens.
  virtual Tensor from_experts(const Tensor& outputs) const { return outputs; }
};

// Every expert in this process.
inline const std::shared_ptr<const ExpertExchange>& local_experts() {
  static const std::shared_ptr<const ExpertExchange> local = std::make_shared<ExpertExchange>();
  return local;
}

}  // namespace triad::nn
