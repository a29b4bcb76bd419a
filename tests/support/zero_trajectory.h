// The ZeRO equivalence check, shared by tests/zero/test_zero_mpi.cpp (host) and
// tests/cuda/test_zero_cuda_mpi.cpp (GPU): 10 clipped AdamW steps of a tiny GPT on the same
// global batches, once in one process (the reference) and once data-parallel over a
// communicator's ranks, each rank taking its slice of every batch. The model and its
// batches live on `device`; trajectories come back on the host.
#pragma once

#include <boost/test/unit_test.hpp>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"
#include "support/check.h"
#include "triad.h"
#include "zero/zero_optimizer.h"

namespace triad::test {

inline constexpr int64_t kGlobalBatch = 16, kSeq = 8, kSteps = 10;
inline constexpr double kLr = 1e-3, kDecay = 0.1, kClip = 0.5;
inline const optim::AdamWOptions kAdam{.lr = kLr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};

// Adam's options for a run; with scheduled_betas, step k runs with betas_of(k) (set before
// the step, as a schedule such as DeepSpeed's OneCycle sets them).
struct AdamRun {
  optim::AdamWOptions options = kAdam;
  bool scheduled_betas = false;
};
inline optim::AdamBetas betas_of(int64_t step) { return {0.8 + 0.05 * double(step % 3), 0.99}; }

inline std::shared_ptr<nn::GPT> make_model(Device device = Device::cpu()) {
  auto model = std::make_shared<nn::GPT>(
      nn::GPTConfig{.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = kSeq, .vocab_size = 32, .init_seed = 11});
  model->to(device);
  return model;
}

// The global batch of step k: (B, T + 1) tokens on the host, the same on every rank. Two
// batches alternate, so the loss falls within the 10 steps.
inline Tensor global_tokens(int64_t step) {
  Generator gen(1000 + uint64_t(step % 2));
  Tensor u = Tensor::empty({kGlobalBatch, kSeq + 1});
  ops::uniform_(u, 0.0, 31.999, gen);
  const std::vector<float> f = u.to_vector<float>();
  return Tensor::from_vector(std::vector<int64_t>(f.begin(), f.end()), {kGlobalBatch, kSeq + 1});
}

// Mean loss of rows [first, first + rows) of a global batch, on `device`, the model's (a
// stage-3 parameter released between steps has no storage, so it cannot tell).
inline Tensor loss_of(nn::GPT& model, const Tensor& tokens, int64_t first, int64_t rows,
                      Device device = Device::cpu()) {
  const Tensor part = ops::narrow(tokens, 0, first, rows);
  return model.loss(ops::to(ops::contiguous(ops::narrow(part, 1, 0, kSeq)), device),
                    ops::to(ops::contiguous(ops::narrow(part, 1, 1, kSeq)), device));
}

// The losses of every step and the final parameters (f32, on the host).
struct Trajectory {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Tensor>> params;
};

inline Tensor host_f32(const Tensor& p) { return ops::to(ops::to(ops::clone(p), DType::f32), Device::cpu()); }

inline Trajectory single_process(int64_t accumulation, Device device = Device::cpu(), const AdamRun& adam = {}) {
  auto model = make_model(device);
  optim::AdamW opt(optim::decay_groups(model->parameters(), kDecay), adam.options);
  Trajectory t;
  const int64_t rows = kGlobalBatch / accumulation;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    double loss = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      const Tensor l = loss_of(*model, tokens, m * rows, rows, device);
      loss += l.item() / double(accumulation);
      backward(l, Tensor::full({}, 1.0 / double(accumulation), DType::f32, l.device()));
    }
    optim::clip_grad_norm(model->parameters(), kClip);
    if (adam.scheduled_betas) opt.set_betas(betas_of(step).beta1, betas_of(step).beta2);
    opt.step();
    opt.zero_grad();
    t.losses.push_back(loss);
  }
  for (const auto& [name, p] : model->named_parameters()) t.params.emplace_back(name, host_f32(p));
  return t;
}

// Options of one data-parallel run. persist: stage 3's persistence threshold (0: every
// group partitioned). dtype: storage of parameters and gradients (bf16/f16: mixed
// precision; f16 with dynamic loss scaling). predivide: gradient_predivide_factor.
struct DataParallelRun {
  int stage = 0;
  int64_t accumulation = 1;
  int64_t persist = 0;
  DType dtype = DType::f32;
  int64_t prefetch = 50000000;
  int64_t bucket = 500000000;
  Device device = Device::cpu();
  double predivide = 1.0;
  AdamRun adam;
  // ZeRO++ (stage 3): its switches and the groups they run over.
  bool quantized_weights = false, quantized_gradients = false;
  int hpz = 1;
  int64_t block = kQuantBlock;
  zero::ZeroPlusPlusGroups groups;
  // Where the optimizer's state lives (offload), by sub-groups of this many elements.
  zero::OffloadConfig offload;
  int64_t sub_group_size = 1000000000;
  zero::ParamOffloadConfig offload_param;  // stage 3
  // Note [Delayed parameter update]; `skip`: the step whose gradients are made infinite
  // (overflow checks on: f32 at a static loss scale of 1), `flush`: the step after which
  // the pending update is applied (as a checkpoint does); -1: none.
  zero::ZeroConfig::DelayedUpdate delayed;
  int64_t skip = -1, flush = -1;
  // Called with the optimizer just before (after = false) and just after each step: what a
  // step moves.
  std::function<void(const zero::ZeroOptimizer&, bool after)> around_step;
};

inline Trajectory data_parallel(const parallel::CommunicatorPtr& comm, const DataParallelRun& run) {
  const int n = comm->size(), r = comm->rank();
  auto model = make_model(run.device);
  const zero::ZeroConfig config{.stage = run.stage,
                                .dtype = run.dtype,
                                .loss_scale = {.dynamic = run.dtype == DType::f16,
                                               .static_scale = run.skip >= 0 ? 1.0 : 0.0,
                                               .initial_scale = 1024.0},
                                .reduce_bucket_size = run.bucket,
                                .allgather_bucket_size = run.bucket,
                                .stage3_param_persistence_threshold = run.persist,
                                .stage3_prefetch_bucket_size = run.prefetch,
                                .gradient_predivide_factor = run.predivide,
                                .quantized_weights = run.quantized_weights,
                                .hpz_partition_size = run.hpz,
                                .quantized_gradients = run.quantized_gradients,
                                .weight_quantization_block = run.block,
                                .gradient_quantization_block = run.block,
                                .offload_optimizer = run.offload,
                                .offload_param = run.offload_param,
                                .sub_group_size = run.sub_group_size,
                                .delayed_update = run.delayed};
  zero::ZeroOptimizer opt(model, config, run.adam.options, kDecay, comm, {}, nullptr, {}, run.groups);
  const int64_t micro = kGlobalBatch / (run.accumulation * n);
  Trajectory t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    double local = 0;
    for (int64_t m = 0; m < run.accumulation; ++m) {
      const Tensor l = loss_of(*model, tokens, (m * n + r) * micro, micro, run.device);
      local += l.item();
      opt.begin_backward(m == run.accumulation - 1);
      const double overflow = step == run.skip ? std::numeric_limits<double>::infinity() : 1.0;
      backward(l, Tensor::full({}, overflow * opt.loss_scale() / double(run.accumulation), DType::f32, l.device()));
    }
    if (run.adam.scheduled_betas) opt.set_betas(betas_of(step).beta1, betas_of(step).beta2);
    if (run.around_step) run.around_step(opt, false);
    opt.step(kLr, kClip);
    if (run.around_step) run.around_step(opt, true);
    if (step == run.flush) opt.apply_pending_update();
    Tensor sum = Tensor::full({1}, local, DType::f64);
    comm->all_reduce(sum)->wait();
    t.losses.push_back(sum.item() / double(n * run.accumulation));
  }
  opt.gather_all();  // stage 3: read the parameters in full
  for (const auto& [name, p] : model->named_parameters()) t.params.emplace_back(name, host_f32(p));
  opt.release_all();
  return t;
}

// Losses and final parameters agree within `tolerance` relative (fp32: 1e-5 between layouts;
// parameters relative to the largest parameter value, since Adam turns last-bit differences
// in near-zero gradients into absolute, not relative, differences of small biases), and the
// run trained.
inline void check_same(const Trajectory& dp, const Trajectory& ref, double tolerance = 1e-5) {
  for (size_t i = 0; i < ref.losses.size(); ++i)
    BOOST_TEST(std::abs(dp.losses[i] - ref.losses[i]) / ref.losses[i] < tolerance, "step " << i);
  BOOST_TEST(dp.losses.back() < ref.losses.front() - 0.05);
  double scale = 0;
  for (const auto& [_, p] : ref.params) scale = std::max(scale, ops::max_abs(p));
  for (size_t i = 0; i < ref.params.size(); ++i) {
    const double err = max_abs_diff(dp.params[i].second, ref.params[i].second) / scale;
    BOOST_TEST(err < tolerance, ref.params[i].first << ": error " << err << " of the largest parameter");
  }
}

}  // namespace triad::test
