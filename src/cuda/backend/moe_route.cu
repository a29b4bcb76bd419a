#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/backend/moe_route_kernels.cuh"

namespace triad::cuda {

namespace {

RouteValues route_values(const Tensor& t) {
  RouteValues v;
  if (t.defined() && t.dtype() == DType::f64) v.f64 = ptr<const double>(t);
  if (t.defined() && t.dtype() == DType::f32) v.f32 = ptr<const float>(t);
  return v;
}

// given, or else drawn by `draws` (Gumbel noise when gumbel).
RouteValues given_or_drawn(const Tensor& given, const RouteDraws& draws, bool gumbel) {
  RouteValues v = route_values(given);
  if (!given.defined()) v.draws = draws, v.gumbel = gumbel;
  return v;
}

}  // namespace

void CudaBackend::moe_route(const Tensor& probs, const Tensor& logits, const Tensor& noise, const Tensor& priority,
                            const MoERouting& routing, const Tensor& expert, const Tensor& location,
                            const Tensor& load, const Tensor& first_load) {
  require_f32(probs, "moe_route");
  const int64_t S = probs.size(0), E = probs.size(1), K = routing.k;
  const RouteValues p = route_values(probs);
  const RouteValues by = K == 1 ? given_or_drawn(priority, routing.priority, /*gumbel=*/false)
                                : (K == 2 ? RouteValues{} : p);
  OnDevice on(probs);
  moe_choose_kernel<<<blocks_for(S), kThreads, 0, on.stream()>>>(
      p, route_values(logits), given_or_drawn(noise, routing.noise, /*gumbel=*/true), S, E, K, ptr<int64_t>(expert));
  TRIAD_CUDA_CHECK_LAUNCH();
  moe_place_kernel<<<unsigned(E), kMoEThreads, 0, on.stream()>>>(ptr<const int64_t>(expert), S, E, K,
                                                                  routing.capacity, by, ptr<int64_t>(location),
                                                                  ptr<int64_t>(load), ptr<int64_t>(first_load));
  TRIAD_CUDA_CHECK_LAUNCH();
}

void CudaBackend::moe_indices(const Tensor& expert, const Tensor& location, int64_t experts, int64_t capacity,
                              const Tensor& load, const Tensor& choice, const Tensor& slot, const Tensor& source) {
  const int64_t S = expert.size(0), K = expert.size(1);
  fill(source, double(S));
  if (S * K == 0) return;
  OnDevice on(expert);
  moe_indices_kernel<<<blocks_for(S * K), kThreads, 0, on.stream()>>>(
      ptr<const int64_t>(expert), ptr<const int64_t>(location), S, K, experts, capacity,
      load.defined() ? ptr<const int64_t>(load) : nullptr, source.numel(), ptr<int64_t>(choice), ptr<int64_t>(slot),
      ptr<int64_t>(source));
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
