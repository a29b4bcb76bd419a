#include "estimate/model_states.h"

#include <cmath>

#include "tensor/error.h"

namespace triad::estimate {

namespace {

void validate(const ModelStateInput& in) {
  TRIAD_CHECK(std::isfinite(in.num_params) && in.num_params > 0,
              "[estimate] the parameter count must be positive, got " << in.num_params);
  TRIAD_CHECK(in.dp >= 1, "[estimate] data-parallel ranks must be at least 1, got " << in.dp);
  TRIAD_CHECK(std::isfinite(in.optimizer_bytes) && in.optimizer_bytes > 0,
              "[estimate] optimizer bytes per parameter (K) must be positive, got " << in.optimizer_bytes);
  TRIAD_CHECK(std::isfinite(in.persistent_params) && in.persistent_params >= 0 && in.persistent_params <= in.num_params,
              "[estimate] persistent parameters must be in [0, " << in.num_params << "], got " << in.persistent_params);
}

}  // namespace

ModelStateBytes model_state_bytes(int stage, const ModelStateInput& in) {
  TRIAD_CHECK(stage >= 0 && stage <= 3, "[estimate] ZeRO stage must be 0, 1, 2 or 3, got " << stage);
  validate(in);
  const double psi = in.num_params, n = double(in.dp), k = in.optimizer_bytes;
  ModelStateBytes b;
  b.stage = stage;
  b.parameters = kParamBytes * (stage >= 3 ? psi / n : psi);
  b.gradients = kGradBytes * (stage >= 2 ? psi / n : psi);
  b.optimizer = k * (stage >= 1 ? psi / n : psi);
  if (stage == 3) {
    b.parameters += kParamBytes * in.persistent_params;
    b.gradients += kGradBytes * in.persistent_params;
  }
  return b;
}

std::array<ModelStateBytes, 4> model_state_bytes_all(const ModelStateInput& in) {
  return {model_state_bytes(0, in), model_state_bytes(1, in), model_state_bytes(2, in), model_state_bytes(3, in)};
}

const char* stage_name(int stage) {
  static const char* const names[] = {"DDP", "P_os", "P_os+g", "P_os+g+p"};
  TRIAD_CHECK(stage >= 0 && stage <= 3, "[estimate] ZeRO stage must be 0, 1, 2 or 3, got " << stage);
  return names[stage];
}

PersistentParams persistent_parameters(const std::vector<std::pair<std::string, int64_t>>& sizes, int64_t threshold) {
  TRIAD_CHECK(threshold >= 0, "[estimate] the persistence threshold must be non-negative, got " << threshold);
  PersistentParams p;
  for (const auto& [_, numel] : sizes) {
    if (numel > threshold) continue;
    ++p.count;
    p.elements += numel;
  }
  return p;
}

}  // namespace triad::estimate
