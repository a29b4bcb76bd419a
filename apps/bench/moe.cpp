#include "bench/moe.h"

#include <chrono>
#include <cstdio>

#include "bench/workers.h"
#include "common/report.h"
#include "cuda/runtime.h"
#include "config/config.h"
#include "engine/engine.h"
#include "parallel/runtime.h"
#include "parallel/self_communicator.h"
#include "train/moe_metrics.h"
#include "triad.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

engine::TrainConfig step_config(const nn::GPTConfig& model, const MoEBenchOptions& o, int ranks) {
  engine::TrainConfig train;
  train.model = model;
  train.micro_batch_size = o.batch;
  train.train_batch_size = o.batch * ranks;
  train.data_parallel = ranks;
  train.gradient_accumulation_steps = 1;
  train.steps = o.warmup + o.steps;
  train.optimizer = {.type = "AdamW", .lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1};
  train.device = o.device;
  return train;
}

// Forward, backward and AdamW of one step, in ms, until the device has finished it; the
// step's expert-parallel bus bytes to `ep_bytes`.
double time_step(engine::Engine& engine, const Tensor& x, const Tensor& y, double* ep_bytes = nullptr) {
  const auto t0 = Clock::now();
  engine.backward(engine.forward(x, y));
  const engine::StepResult r = engine.step();
  if (engine.device().is_cuda()) cuda::synchronize(engine.device().index);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (ep_bytes) *ep_bytes = r.comm.contains("ep") ? r.comm["ep"]["bus_bytes"].get<double>() : 0.0;
  return ms;
}

// 6 FLOPs per active parameter per token (the experts a token runs, not all of them) plus
// attention's 6 L C T.
double flops_per_token(const nn::GPTConfig& c, int64_t top_k, int64_t seq) {
  double active = 0;
  for (const auto& [name, n] : c.parameter_sizes()) {
    const size_t at = name.find(".moe.experts.");
    if (at == std::string::npos) {
      active += double(n);
    } else {  // one expert's share, k of them per token
      const int64_t block = std::stoll(name.substr(7));
      active += double(n) * double(top_k) / double(c.moe.at(block).num_experts);
    }
  }
  return 6.0 * active + 6.0 * double(c.n_layer * c.d_model * seq);
}

// Whether every MoE layer of `model` runs its experts' products grouped.
void set_grouped_experts(nn::Module& model, const nn::ModulePtr& self, bool grouped) {
  for (const auto& [name, module] : model.named_modules(self))
    if (auto* experts = dynamic_cast<nn::Experts*>(module.get())) experts->grouped = grouped;
}

}  // namespace

int run_moe_bench(const MoEBenchOptions& o) {
  parallel::CommunicatorPtr world = std::make_shared<parallel::SelfCommunicator>();
  if (o.ep > 1) {
    TRIAD_CHECK(parallel::launched_by_mpirun(), "--ep " << o.ep << ": run under mpirun -np a multiple of " << o.ep);
    int argc = 0;
    char** argv = nullptr;
    world = parallel::init(argc, argv);
  }
  const int n = world->size();
  const bool leader = world->rank() == 0;
  TRIAD_CHECK(n % o.ep == 0, "--ep " << o.ep << " must divide the job's " << n << " ranks");
  TRIAD_CHECK(o.experts % o.ep == 0, "--experts " << o.experts << " must be divisible by --ep " << o.ep);
  const int threads = app::set_threads(n > 1 ? parallel::threads_per_rank(o.threads) : o.threads);
  const nn::GPTConfig dense = nn::GPTConfig::preset(o.model);
  nn::GPTConfig sparse = dense;
  sparse.moe = {.num_experts = {o.experts},
                .every = o.every,
                .layer = {.k = o.top_k, .capacity_factor = o.capacity_factor, .drop_tokens = !o.dropless}};
  sparse.validate();
  TRIAD_CHECK(o.seq <= dense.seq_len, "--seq " << o.seq << " exceeds the model's seq_len " << dense.seq_len);
  const engine::TrainConfig dense_train = step_config(dense, o, n);
  engine::TrainConfig sparse_train = step_config(sparse, o, n);
  sparse_train.expert_parallel = o.ep;
  engine::Engine dense_engine(dense_train, engine::process_grid(dense_train, world));
  engine::Engine sparse_engine(sparse_train, engine::process_grid(sparse_train, world));
  const Tensor all = random_token_ids(o.batch, o.seq + 1, dense.vocab_size, 7 + uint64_t(world->rank()));
  const Tensor x = ops::contiguous(ops::narrow(all, 1, 0, o.seq)), y = ops::contiguous(ops::narrow(all, 1, 1, o.seq));

  if (leader)
    std::printf("triad-bench moe: %s, %lld experts top-%lld every %lld blocks (capacity factor %.2f), batch %lld x "
                "seq %lld per rank, %d ranks (ep %d), %d threads, on %s%s\n",
                o.model.c_str(), (long long)o.experts, (long long)o.top_k, (long long)o.every, o.capacity_factor,
                (long long)o.batch, (long long)o.seq, n, o.ep, threads, o.device.c_str(), o.dropless ? ", dropless" : "");
  if (leader)
    std::printf("%6s %12s %12s %14s%s\n", "step", "dense_ms", "moe_ms", "ep_bus_bytes",
                o.compare_loop ? "  moe_loop_ms" : "");
  std::vector<double> dense_ms, moe_ms, loop_ms;
  double ep_bytes = 0;  // rank 0's, of the last step
  const nn::ModulePtr sparse_model = sparse_engine.model_ptr();
  for (int s = 0; s < o.warmup + o.steps; ++s) {  // alternated, so that all see the same machine
    const double d = time_step(dense_engine, x, y), m = time_step(sparse_engine, x, y, &ep_bytes);
    double l = 0;
    if (o.compare_loop) {
      set_grouped_experts(*sparse_model, sparse_model, false);
      l = time_step(sparse_engine, x, y);
      set_grouped_experts(*sparse_model, sparse_model, true);
    }
    if (leader) {
      std::printf("%6d %12.1f %12.1f %14.0f", s, d, m, ep_bytes);
      if (o.compare_loop) std::printf(" %12.1f", l);
      std::printf("%s\n", s < o.warmup ? "  (warmup)" : "");
    }
    if (s < o.warmup) continue;
    dense_ms.push_back(d);
    moe_ms.push_back(m);
    if (o.compare_loop) loop_ms.push_back(l);
  }
  const nlohmann::json moe =
      engine::moe_metrics(sparse_engine.model(), sparse.moe, sparse.n_layer, n > 1 ? world.get() : nullptr);
  double imbalance = 0;  // the busiest expert's share of choices over the even share, worst block
  for (const auto& layer : moe["layers"]) {
    double most = 0;
    for (const auto& share : layer["load"]) most = std::max(most, share.get<double>());
    imbalance = std::max(imbalance, most * double(o.experts));
  }
  // The all-to-alls' closed form (Note [Expert parallelism]): per MoE block, to_experts and
  // from_experts forward and their adjoints backward, each moving the (E, C, d) f32 slots.
  const int64_t capacity =
      nn::expert_capacity(o.batch * o.seq, o.experts, o.top_k, o.capacity_factor, sparse.moe.layer.min_capacity);
  const double ep_closed = 4.0 * double(sparse.moe.moe_blocks(sparse.n_layer)) *
                           double(o.experts * capacity * sparse.d_model) * 4.0 * double(o.ep - 1) / double(o.ep);
  const double tokens = double(o.batch * o.seq * n), d = app::median(dense_ms), m = app::median(moe_ms);
  double dense_params = 0, moe_params = 0;
  for (const auto& [_, count] : dense.parameter_sizes()) dense_params += double(count);
  for (const auto& [_, count] : sparse.parameter_sizes()) moe_params += double(count);
  if (!leader) return 0;
  std::printf("median: dense %.1f ms/step (%.0f tokens/s), moe %.1f ms/step (%.0f tokens/s): moe/dense %.2fx; "
              "parameters %.2fM vs %.2fM; dropped %.1f%% of choices; busiest expert %.2fx its even share\n",
              d, tokens / (d / 1e3), m, tokens / (m / 1e3), m / d, dense_params / 1e6, moe_params / 1e6,
              100.0 * moe["dropped_fraction"].get<double>(), imbalance);
  const double lm = o.compare_loop ? app::median(loop_ms) : 0.0;
  if (o.compare_loop)
    std::printf("experts grouped %.1f ms/step, one by one %.1f ms/step: grouped/loop %.3fx\n", m, lm, m / lm);
  if (o.ep > 1 && !o.dropless)
    std::printf("all-to-all bus bytes per step on rank 0: %.0f measured, %.0f closed form (C = %lld slots): %+.3f%%\n",
                ep_bytes, ep_closed, (long long)capacity, 100.0 * (ep_bytes - ep_closed) / ep_closed);
  app::print_json_line({{"bench", "moe"},
                        {"model", o.model},
                        {"experts", o.experts},
                        {"top_k", o.top_k},
                        {"every", o.every},
                        {"capacity_factor", o.capacity_factor},
                        {"dropless", o.dropless},
                        {"batch", o.batch},
                        {"seq", o.seq},
                        {"ranks", n},
                        {"ep", o.ep},
                        {"device", o.device},
                        {"threads", threads},
                        {"steps", o.steps},
                        {"dense_step_ms_median", d},
                        {"moe_step_ms_median", m},
                        {"moe_over_dense", m / d},
                        {"dense_tokens_per_s", tokens / (d / 1e3)},
                        {"moe_tokens_per_s", tokens / (m / 1e3)},
                        {"dense_flops_per_token", flops_per_token(dense, 1, o.seq)},
                        {"moe_active_flops_per_token", flops_per_token(sparse, o.top_k, o.seq)},
                        {"dense_params", int64_t(dense_params)},
                        {"moe_params", int64_t(moe_params)},
                        {"dropped_fraction", moe["dropped_fraction"]},
                        {"busiest_expert_over_even", imbalance},
                        {"ep_bus_bytes_per_step", ep_bytes},
                        {"ep_bus_bytes_closed_form", ep_closed},
                        {"moe_loss", moe["loss"]},
                        {"moe_loop_step_ms_median", o.compare_loop ? nlohmann::json(lm) : nlohmann::json()},
                        {"grouped_over_loop", o.compare_loop ? nlohmann::json(m / lm) : nlohmann::json()}});
  return 0;
}

}  // namespace triad::bench
