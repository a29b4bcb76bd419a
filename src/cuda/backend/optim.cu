// Optimizer updates (tensor/cpu/optim.cpp on the GPU): every parameter of a call in one
// launch of the multi-tensor kernels (Note [Multi-tensor optimizer] in
// cuda/backend/multi_tensor_kernels.cuh), in the CPU's arithmetic and order, with a
// 16-bit copy of the parameter (mixed precision) written in the same pass.
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/multi_tensor_kernels.cuh"

namespace triad::cuda {

namespace {

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

}  // namespace triad::cuda
