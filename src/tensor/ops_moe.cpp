// Mixture-of-Experts routing ops of tensor/ops.h (tensor/expert_routing.h).
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace triad::ops {

namespace {

void check_values(const Tensor& t, const Tensor& probs, const char* name) {
  if (!t.defined()) return;
  TRIAD_CHECK(t.shape() == probs.shape() && t.dtype() == DType::f64 && t.is_contiguous() &&
                  t.device() == probs.device(),
              "moe_route: expected " << name << " " << shape_str(probs.shape()) << " f64 contiguous on "
                                     << probs.device().str() << ", got " << t.str());
}

void check_choices(const Tensor& t, const Shape& shape, Device device, const char* op, const char* name) {
  TRIAD_CHECK(t.shape() == shape && t.dtype() == DType::i64 && t.is_contiguous() && t.device() == device,
              op << ": expected " << name << " " << shape_str(shape) << " i64 contiguous on " << device.str()
                 << ", got " << t.str());
}

}  // namespace

MoERouteOut moe_route(const Tensor& probs, const Tensor& logits, const MoERouting& routing, const Tensor& noise,
                      const Tensor& priority) {
  TRIAD_CHECK(probs.dim() == 2 && probs.size(0) >= 1 && probs.size(1) >= 1 &&
                  (probs.dtype() == DType::f32 || probs.dtype() == DType::f64) && probs.is_contiguous(),
              "moe_route: expected probs (S >= 1, E >= 1) f32 or f64 contiguous, got " << probs.str());
  TRIAD_CHECK(logits.shape() == probs.shape() && logits.dtype() == probs.dtype() && logits.is_contiguous() &&
                  logits.device() == probs.device(),
              "moe_route: expected logits like probs " << probs.str() << ", got " << logits.str());
  const int64_t S = probs.size(0), E = probs.size(1), K = routing.k;
  TRIAD_CHECK(K >= 1 && K <= E && routing.capacity >= -1,
              "moe_route: expected k in [1, " << E << "] and capacity >= 0 (or -1: dropless), got k " << K
                                              << ", capacity " << routing.capacity);
  check_values(noise, probs, "noise");
  check_values(priority, probs, "priority");
  const Device device = probs.device();
  MoERouteOut r{Tensor::empty({S, K}, DType::i64, device), Tensor::empty({S, K}, DType::i64, device),
                Tensor::empty({E}, DType::i64, device), Tensor::empty({E}, DType::i64, device)};
  backend_for(device).moe_route(probs, logits, noise, priority, routing, r.expert, r.location, r.load, r.first_load);
  return r;
}

MoEIndices moe_indices(const Tensor& expert, const Tensor& location, int64_t experts, int64_t capacity) {
  TRIAD_CHECK(expert.dim() == 2 && experts >= 1 && capacity >= 0,
              "moe_indices: expected expert (S, k), experts >= 1 and capacity >= 0, got "
                  << expert.str() << ", " << experts << ", " << capacity);
  const Device device = expert.device();
  check_choices(expert, expert.shape(), device, "moe_indices", "expert");
  check_choices(location, expert.shape(), device, "moe_indices", "location");
  MoEIndices r{Tensor::empty(expert.shape(), DType::i64, device), Tensor::empty(expert.shape(), DType::i64, device),
               Tensor::empty({experts, capacity}, DType::i64, device)};
  backend_for(device).moe_indices(expert, location, experts, capacity, Tensor(), r.choice, r.slot, r.source);
  return r;
}

MoEIndices moe_indices_dropless(const Tensor& expert, const Tensor& location, const Tensor& load) {
  TRIAD_CHECK(expert.dim() == 2 && load.dim() == 1 && load.size(0) >= 1,
              "moe_indices_dropless: expected expert (S, k) and load (E), got " << expert.str() << ", " << load.str());
  const Device device = expert.device();
  check_choices(expert, expert.shape(), device, "moe_indices_dropless", "expert");
  check_choices(location, expert.shape(), device, "moe_indices_dropless", "location");
  check_choices(load, load.shape(), device, "moe_indices_dropless", "load");
  const int64_t rows = expert.numel();
  MoEIndices r{Tensor::empty(expert.shape(), DType::i64, device), Tensor::empty(expert.shape(), DType::i64, device),
               Tensor::empty({rows}, DType::i64, device)};
  backend_for(device).moe_indices(expert, location, load.size(0), 0, load, r.choice, r.slot, r.source);
  return r;
}

}  // namespace triad::ops
