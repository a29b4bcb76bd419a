// Optimizer updates (tensor/cpu/optim.cpp on the GPU): every parameter of a call in one
// launch of the multi-tensor kernels (Note [Multi-tensor optimizer] in
// cuda/backend/multi_tensor_kernels.cuh), in the CPU's arithmetic and order, with a
// 16-bit copy of the parameter (mixed precision) written in the same pass; and the loss
// scale's unscaling and verdict (Note [Loss scale on the device] in zero/device_loss_scale.h).
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/multi_tensor_kernels.cuh"
#include "tensor/loss_scale_math.h"

namespace triad::cuda {

namespace {

// tensor/loss_scale_math.h's step, on one thread: the host never reads the verdict.
__global__ void loss_scale_kernel(const double* squared, double* state, const double* ring, int64_t rows,
                                  int64_t groups, float* constants, double* outcome, LossScaleRule rule) {
  loss_scale_step(squared, state, ring, rows, groups, constants, outcome, rule);
}

template <class Entry>
void launch_tables(const Tensor& on_device, const std::vector<Entry>& entries) {
  OnDevice on(on_device);
  for_each_table(entries, [&](const TensorTable<Entry>& table, int blocks) {
    multi_tensor_kernel<<<unsigned(blocks), kTableThreads, 0, on.stream()>>>(table);
    TRIAD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void CudaBackend::adamw(const std::vector<AdamWTensors>& updates) {
  std::vector<AdamWEntry> entries;
  entries.reserve(updates.size());
  for (const AdamWTensors& u : updates) {
    require_f32(u.param, "adamw");
    entries.push_back({ptr<float>(u.param), ptr<const float>(u.grad), ptr<float>(u.exp_avg), ptr<float>(u.exp_avg_sq),
                       u.param_copy.defined() ? floats(u.param_copy, "adamw") : Floats{}, u.param.numel(),
                       AdamWConstants<float>::of(u.step),
                       u.constants.defined() ? ptr<const AdamWConstants<float>>(u.constants) : nullptr});
  }
  launch_tables(updates.front().param, entries);
}

void CudaBackend::sgd(const std::vector<SGDTensors>& updates, const SGDStep& step) {
  std::vector<SGDEntry> entries;
  entries.reserve(updates.size());
  for (const SGDTensors& u : updates) {
    require_f32(u.param, "sgd");
    entries.push_back({ptr<float>(u.param), ptr<const float>(u.grad),
                       u.momentum_buffer.defined() ? ptr<float>(u.momentum_buffer) : nullptr, u.param.numel(),
                       SGDConstants<float>::of(step, u.first)});
  }
  launch_tables(updates.front().param, entries);
}

void CudaBackend::clip_to_norm(const std::vector<Tensor>& grads, const Tensor& squared, double max_norm) {
  std::vector<ClipEntry> entries;
  entries.reserve(grads.size());
  for (const Tensor& g : grads)
    if (g.numel() > 0) entries.push_back({ptr<float>(g), g.numel(), ptr<const double>(squared), max_norm});
  if (!entries.empty()) launch_tables(squared, entries);
}

void CudaBackend::mul_by(const std::vector<Tensor>& tensors, const Tensor& factor) {
  std::vector<ScaleEntry> entries;
  entries.reserve(tensors.size());
  for (const Tensor& t : tensors)
    if (t.numel() > 0) entries.push_back({ptr<float>(t), t.numel(), ptr<const double>(factor)});
  if (!entries.empty()) launch_tables(factor, entries);
}

void CudaBackend::loss_scale_step(const Tensor& squared, const Tensor& state, const Tensor& ring,
                                  const Tensor& constants, const Tensor& outcome, const LossScaleRule& rule) {
  OnDevice on(state);
  loss_scale_kernel<<<1, 1, 0, on.stream()>>>(ptr<const double>(squared), ptr<double>(state), ptr<const double>(ring),
                                              ring.size(0), constants.size(0), ptr<float>(constants),
                                              ptr<double>(outcome), rule);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
