// Model-state memory of ZeRO stages 0-3 per data-parallel rank: the ZeRO paper's Table 1
// (Rajbhandari et al., arXiv 1910.02054, section 5.1) and DeepSpeed's
// estimate_zero{2,3}_model_states_mem_needs, without offload. Pure arithmetic: nothing here
// allocates a tensor or talks to a communicator, so the figures can be computed for models
// far larger than the machine running the estimate.
//
// Ψ parameters, n data-parallel ranks, 16-bit parameters and gradients (2 bytes each) and
// K bytes of optimizer state per parameter (K = 12 for mixed-precision Adam: fp32 master
// weights, momentum and variance):
//
//   stage         parameters   gradients   optimizer   total per rank
//   0 (DDP)       2Ψ           2Ψ          KΨ          (2+2+K)Ψ
//   1 (P_os)      2Ψ           2Ψ          KΨ/n        2Ψ+2Ψ+KΨ/n
//   2 (P_os+g)    2Ψ           2Ψ/n        KΨ/n        2Ψ+(2+K)Ψ/n
//   3 (P_os+g+p)  2Ψ/n         2Ψ/n        KΨ/n        (2+2+K)Ψ/n
//
// The figures are the paper's continuous ones: no shard padding (DeepSpeed pads each
// partition by at most a few elements per parameter or 2n per group), no communication
// buckets, no activations. Stage 3 optionally adds DeepSpeed's persistent parameters:
// parameters of at most stage3_param_persistence_threshold elements stay whole on every
// rank, so their 16-bit parameter and gradient (2 + 2 bytes each) are added to stage 3's
// per-rank figure on top of the evenly sharded Ψ.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace triad::estimate {

// Bytes per element of the 16-bit parameter and gradient copies the table assumes.
inline constexpr double kParamBytes = 2.0;
inline constexpr double kGradBytes = 2.0;
// Bytes of optimizer state per parameter for mixed-precision Adam (fp32 master, m, v).
inline constexpr double kAdamMixedPrecisionBytes = 12.0;
// DeepSpeed's default stage3_param_persistence_threshold, in elements.
inline constexpr int64_t kDefaultPersistenceThreshold = 100000;

struct ModelStateInput {
  double num_params = 0;                              // Ψ, > 0
  int64_t dp = 1;                                     // n, data-parallel ranks, >= 1
  double optimizer_bytes = kAdamMixedPrecisionBytes;  // K, bytes of optimizer state per parameter, > 0
  double persistent_params = 0;                       // stage 3 only: elements kept whole on every rank, in [0, Ψ]
};

// Model-state bytes one data-parallel rank holds under one stage.
struct ModelStateBytes {
  int stage = 0;
  double parameters = 0;  // 16-bit parameters
  double gradients = 0;   // 16-bit gradients
  double optimizer = 0;   // optimizer state (K bytes per parameter, sharded from stage 1 on)
  double total() const { return parameters + gradients + optimizer; }
};

// One stage (0..3). Throws triad::Error naming the field for a bad input or stage.
ModelStateBytes model_state_bytes(int stage, const ModelStateInput& input);
// Stages 0, 1, 2 and 3, in order.
std::array<ModelStateBytes, 4> model_state_bytes_all(const ModelStateInput& input);
// The paper's name of a stage: "DDP", "P_os", "P_os+g", "P_os+g+p".
const char* stage_name(int stage);

// --- persistent parameters ---

// The parameters DeepSpeed's stage 3 keeps whole on every rank: those with
// numel <= threshold (mark_persistent_parameters; its model-wide cap,
// model_persistence_threshold, defaults to unlimited and is not modelled).
struct PersistentParams {
  int64_t count = 0;     // parameters at or under the threshold
  int64_t elements = 0;  // their elements together
};
// sizes: (name, elements) of every parameter, e.g. nn::GPTConfig::parameter_sizes().
PersistentParams persistent_parameters(const std::vector<std::pair<std::string, int64_t>>& sizes,
                                       int64_t threshold = kDefaultPersistenceThreshold);

}  // namespace triad::estimate
