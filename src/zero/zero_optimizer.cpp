#include "zero/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "optim/clip.h"
#include "tensor/allocator.h"
#include "tensor/device_runtime.h"
#include "tensor/ops.h"
#include "tensor/optimizer_ops.h"
#include "zero/buckets.h"
#include "zero/host_shard_store.h"
#include "zero/nvme_shard_store.h"
#include "zero/partial_offload_store.h"

namespace triad::zero {

namespace {

// The group a flat group's parameters are tied over: all of them in one tie, or none.
parallel::Communicator* tie_of(const PipelinePlacement& p, const std::vector<std::pair<std::string, Tensor>>& params) {
  for (const PipelinePlacement::Tie& tie : p.ties) {
    size_t tied = 0;
    for (const auto& [name, _] : params)
      tied += std::find(tie.params.begin(), tie.params.end(), name) != tie.params.end();
    if (tied == 0) continue;
    TRIAD_CHECK(tied == params.size(), "ZeRO: tied parameter " << tie.params.front()
                                                               << " shares a unit with untied ones; give its module a "
                                                               << "unit of its own (WrapPolicy::module_names)");
    return tie.group.get();
  }
  return nullptr;
}

// Where the model's parameters are (the first one's device; the CPU when it has none).
Device device_of(const std::vector<Unit>& units) {
  for (const Unit& u : units)
    if (!u.params.empty()) return u.params.front().second.device();
  return Device::cpu();
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(const nn::ModulePtr& model, const ZeroConfig& config, const optim::AdamWOptions& adamw,
                             double weight_decay, parallel::CommunicatorPtr dp, const WrapPolicy& policy,
                             parallel::CommunicatorPtr tp, PipelinePlacement pipeline, ZeroPlusPlusGroups zeropp,
                             ExpertPlacement experts)
    : config_(config),
      scaler_(config.loss_scale),
      adamw_(adamw),
      dp_(std::move(dp)),
      tp_(std::move(tp)),
      pipeline_(std::move(pipeline)),
      zeropp_(std::move(zeropp)),
      experts_(std::move(experts)),
      units_(make_units(model, policy)),
      device_(device_of(units_)) {
  TRIAD_CHECK(dp_ != nullptr, "ZeRO needs a data-parallel communicator");
  config_.validate(dp_->size());
  const OffloadConfig& offload = config_.offload_optimizer;
  // Note [Offloaded gradients]: where nothing needs the rank's gradient shard whole.
  const bool gradients = config_.stage >= 2 && !config_.defer_reduction && !config_.delayed_update.enabled &&
                         (!tp_ || tp_->size() == 1) && pipeline_.ties.empty() &&
                         (!pipeline_.pp || pipeline_.pp->size() == 1);
  std::map<std::string, nn::TensorSplit> splits;
  for (auto& [name, split] : model->named_splits()) splits.emplace(name, split);
  if (offload.device == OffloadDevice::nvme)
    store_ = std::make_unique<NvmeShardStore>(device_, offload, config_.aio, gradients);
  else if (offload.device == OffloadDevice::cpu && (!device_.is_cpu() || offload.host_store_on_cpu) &&
           offload.ratio < 1.0)  // Note [Partial offload]: the split needs the rank's whole state
    store_ = std::make_unique<PartialOffloadStore>(device_, config_.dtype, offload.pin_memory, offload.ratio,
                                                   state_elements(splits));
  else if (offload.device == OffloadDevice::cpu && (!device_.is_cpu() || offload.host_store_on_cpu))
    store_ = std::make_unique<HostShardStore>(device_, config_.dtype, offload.pin_memory);
  else  // none, or cpu on the cpu: the state already is in host memory
    store_ = std::make_unique<DeviceShardStore>(device_);
  // Note [Offloaded parameters]: cpu on the cpu keeps the parameters where they are.
  const ParamOffloadConfig& params = config_.offload_param;
  if (params.device == OffloadDevice::nvme ||
      (params.device == OffloadDevice::cpu && (!device_.is_cpu() || params.host_store_on_cpu)))
    param_swap_ = std::make_unique<ParamSwap>(params, config_.aio, device_);
  TRIAD_CHECK(!param_swap_ || !config_.delayed_update.enabled,
              "[config] zero_optimization.delayed_update does not run with offload_param.device \"cpu\" on a "
                  << device_.str() << " device (the pending update would hold every parameter shard on the device); "
                  << "turn one of them off");
  TRIAD_CHECK(!config_.delayed_update.enabled || device_.is_cpu() ||
                  (offload.device == OffloadDevice::cpu && offload.ratio == 1.0),
              "[config] zero_optimization.delayed_update runs with the training on device \"cpu\", or with "
              "offload_optimizer.device \"cpu\" and ratio 1 (every update on the host), not on "
                  << device_.str() << " with the optimizer's state on it");
  check_zeropp();
  check_expert_placement(experts_, dp_->size());
  groups_.reserve(8 * units_.size());  // hooks hold Group pointers: no reallocation after this
  for (const Unit& u : units_) {
    unit_groups_.emplace_back();
    for (GroupSpec& spec : group_specs(u, splits)) {
      Group g;
      g.comm = spec.expert ? experts_.edp.get() : dp_.get();
      g.flat = std::make_unique<FlatGroup>(std::move(spec.params), spec.decay ? weight_decay : 0.0, g.comm->size(),
                                           g.comm->rank(), config_.dtype);
      TRIAD_CHECK(g.flat->device() == device_, "ZeRO: the model's parameters are on "
                                                   << device_.str() << " and " << g.flat->device().str()
                                                   << "; they must share one device");
      for (const auto& [name, _] : g.flat->params()) g.splits.push_back(splits.at(name));
      g.tie = tie_of(pipeline_, g.flat->params());
      const Tensor initial = g.flat->take_initial_f32();
      const Tensor master = config_.dtype == DType::f32 ? Tensor()
                            : config_.stage == 0        ? initial
                                                        : ops::clone(g.flat->shard(initial));
      add_state(g, master);
      if (config_.stage >= 1 && !store_->keeps_gradients())
        g.shard_grad = Tensor::zeros({g.flat->shard_size()}, config_.dtype, device_);
      if (config_.stage <= 1) g.flat->grad();  // full gradients live throughout
      g.partitioned = config_.stage == 3 && !spec.persistent;
      if (g.partitioned) g.flat->partition();
      groups_.push_back(std::move(g));
      unit_groups_.back().push_back(&groups_.back());
    }
    // Unit by unit, so that the model never needs its parameters in memory twice: its shards
    // go to their file, and the storage the flat groups replaced goes back to the system
    // rather than to the CPU allocator's cache (Note [Caching CPU allocator]).
    if (param_swap_) offload_params(unit_groups_.size() - 1);
    if (device_.is_cpu()) cpu_allocator().empty_cache();
  }
  for (Group& g : groups_) {
    for (const auto& [_, p] : g.flat->params()) {
      Group* group = &g;
      // Stages 2 and 3 allocate a group's flat gradient when its first gradient arrives
      // (before it is added: a linear's backward may add into it, Note [Gradients added in
      // place] in autograd/weight_grad.h).
      register_pre_accumulate_grad_hook(p, [group](const Tensor&) { group->flat->grad(); });
      register_post_accumulate_grad_hook(p, [this, group](const Tensor&) { on_grad_ready(*group); });
    }
  }
  if (config_.stage == 3) install_stage3_hooks();
  // Note [Loss scale on the device]: where the whole update runs there, so does the
  // overflow test.
  const bool scaled = config_.loss_scale.dynamic || config_.loss_scale.static_scale > 0;
  if (scaled && updates_on_device() && !config_.delayed_update.enabled) {
    device_scale_ = std::make_unique<DeviceLossScale>(config_.loss_scale, config_.gradient_predivide_factor,
                                                      dp_->size(), int64_t(groups_.size()), device_);
    step_constants_ = device_scale_->constants();
  }
}

bool ZeroOptimizer::updates_on_device() const {
  if (param_swap_ || store_->keeps_gradients()) return false;
  for (const Group& g : groups_)
    for (const Group::SubGroup& sub : g.subgroups)
      if (!store_->resident(sub.entry) || store_->updates_on_host(sub.entry)) return false;
  return true;
}

std::vector<ZeroOptimizer::GroupSpec> ZeroOptimizer::group_specs(
    const Unit& u, const std::map<std::string, nn::TensorSplit>& splits) const {
  GroupSpec lists[2][2][2];  // [expert][decay][persistent]
  for (const auto& np : u.params) {
    const bool persistent = config_.stage == 3 && np.second.numel() <= config_.stage3_param_persistence_threshold;
    const bool expert = experts_.spread() && splits.at(np.first).expert;
    lists[expert][np.second.dim() >= 2][persistent].params.push_back(np);
  }
  std::vector<GroupSpec> out;
  for (int decay : {1, 0})
    for (int kind = 0; kind < 4; ++kind) {  // dense, dense persistent, expert, expert persistent
      const int expert = kind / 2, persistent = kind % 2;
      GroupSpec& spec = lists[expert][decay][persistent];
      if (spec.params.empty()) continue;
      spec.decay = decay, spec.expert = expert, spec.persistent = persistent;
      out.push_back(std::move(spec));
    }
  return out;
}

int64_t ZeroOptimizer::state_elements(const std::map<std::string, nn::TensorSplit>& splits) const {
  int64_t total = 0;
  for (const Unit& u : units_)
    for (const GroupSpec& spec : group_specs(u, splits)) {
      int64_t numel = 0;
      for (const auto& [_, p] : spec.params) numel += p.numel();
      const int ranks = spec.expert ? experts_.edp->size() : dp_->size();
      const int64_t padded = FlatGroup::padded_size(numel, ranks);
      total += config_.stage == 0 ? padded : padded / ranks;
    }
  return total;
}

void ZeroOptimizer::offload_params(size_t u) {
  const ParamOffloadConfig& c = config_.offload_param;
  int64_t shards = 0;
  for (Group* g : unit_groups_[u]) {
    if (!g->partitioned) continue;
    ++shards;
    TRIAD_CHECK(c.device != OffloadDevice::nvme || g->flat->shard_size() <= c.buffer_size,
                "[config] zero_optimization.offload_param.buffer_size " << c.buffer_size << " is too small: unit '"
                << units_[u].name << "' has a parameter shard of " << g->flat->shard_size() << " elements");
    param_swap_->add(*g->flat);
    // Note [Parameters updated in place]: the host update writes the shard where it lives,
    // or (a file, mixed precision) into a host buffer the file is written from.
    // (Note [Partial offload]: every sub-group of the shard updated on the host.)
    if (!std::all_of(g->subgroups.begin(), g->subgroups.end(),
                     [&](const Group::SubGroup& sub) { return store_->updates_on_host(sub.entry); }))
      continue;
    Tensor host = param_swap_->host_slot(*g->flat);
    if (!host.defined() && config_.dtype != DType::f32)
      host = g->host_params = Tensor::zeros({g->flat->shard_size()}, config_.dtype);
    if (!host.defined()) continue;  // f32 over a file: the update reads the shard in
    for (const Group::SubGroup& sub : g->subgroups)
      store_->keep_params_in(sub.entry, g->subgroups.size() == 1 ? host : ops::narrow(host, 0, sub.first, sub.count));
    g->in_place = true;
  }
  TRIAD_CHECK(shards <= c.buffer_count, "[config] zero_optimization.offload_param.buffer_count "
                                            << c.buffer_count << " is too small: unit '" << units_[u].name
                                            << "' gathers " << shards << " parameter shards at once");
}

void ZeroOptimizer::add_state(Group& g, const Tensor& master) {
  const int64_t elements = config_.stage == 0 ? g.flat->padded() : g.flat->shard_size();
  // Only a store that swaps, or splits by sub-groups (Note [Partial offload]), cuts groups
  // into sub-groups; the others keep each one whole.
  const OffloadConfig& o = config_.offload_optimizer;
  const bool cut = o.device == OffloadDevice::nvme || (o.device == OffloadDevice::cpu && o.ratio < 1.0);
  const int64_t unit = cut ? config_.sub_group_size : elements;
  int64_t first = 0;
  do {
    const int64_t count = std::min(unit, elements - first);
    const Tensor part = !master.defined() || count == elements ? master : ops::narrow(master, 0, first, count);
    g.subgroups.push_back({store_->add(part, count), first, count});
    first += count;
  } while (first < elements);
}

void ZeroOptimizer::check_zeropp() {
  const ZeroConfig& c = config_;
  const int n = dp_->size(), h = c.hpz_partition_size;
  if (h > 1)
    TRIAD_CHECK(zeropp_.hpz && zeropp_.hpz->size() == h,
                "ZeRO++ hpZ: the hpZ group has " << (zeropp_.hpz ? zeropp_.hpz->size() : 0) << " ranks, not " << h);
  if (!c.quantized_gradients) return;
  TRIAD_CHECK(zeropp_.intra && zeropp_.inter, "ZeRO++ qgZ needs the node groups of the data-parallel group");
  const int local = zeropp_.intra->size(), nodes = zeropp_.inter->size();
  // Every rank's (node, local position): the grid qgZ's two hops walk. Nodes holding
  // different numbers of the group's ranks leave holes or collisions in it.
  const Tensor mine = Tensor::from_vector(std::vector<int32_t>{zeropp_.inter->rank(), zeropp_.intra->rank(), local},
                                          {3});
  const Tensor all = Tensor::empty({3 * n}, DType::i32);
  dp_->all_gather(mine, all)->wait();
  const std::vector<int32_t> where = all.to_vector<int32_t>();
  node_order_.assign(size_t(n), -1);
  bool uniform = int64_t(local) * nodes == n;
  for (int d = 0; d < n && uniform; ++d) {
    const int node = where[size_t(3 * d)], pos = where[size_t(3 * d + 1)];
    uniform = where[size_t(3 * d + 2)] == local && node < nodes && pos < local &&
              node_order_[size_t(node * local + pos)] == -1;
    if (uniform) node_order_[size_t(node * local + pos)] = d;
  }
  TRIAD_CHECK(uniform, "[config] zero_optimization.zero_quantized_gradients: the " << n << " data-parallel ranks "
                                                                                   << "are spread unevenly over nodes ("
                                                                                   << local << " on this rank's node, "
                                                                                   << nodes << " nodes); qgZ needs "
                                                                                   << "every node to hold equally many");
  reducer_ = std::make_unique<HierarchicalReducer>(zeropp_.intra, zeropp_.inter, node_order_, c.gradient_quantization_block);
}

void ZeroOptimizer::install_stage3_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    nn::Module& m = *units_[u].module;
    m.register_forward_pre_hook([this, u](nn::Module&) {
      gather_unit(u, Use::forward);
      prefetch_ahead(u, +1);
    });
    m.register_forward_output_hook([this, u](nn::Module&, const Tensor& out) {
      if (!GradMode::enabled() || !requires_grad(out)) return;
      register_hook(out, [this, u](const Tensor& grad) {
        gather_unit(u, Use::backward);
        prefetch_ahead(u, -1);
        return grad;
      });
    });
    m.register_forward_hook([this, u](nn::Module&) { release_unit(u); });
  }
}

void ZeroOptimizer::prefetch_unit(size_t u, Use use, bool wait) {
  if (u >= units_.size()) return;
  for (Group* g : unit_groups_[u]) {
    if (g->flat->flat().defined() || !g->partitioned) continue;
    if (param_swap_) {
      // Offloaded: the shard is read on the I/O thread; the gather starts once it is in.
      if (!wait && !param_swap_->ready(*g->flat)) {
        param_swap_->start_read(*g->flat);
        continue;
      }
      param_swap_->bring_in(*g->flat);
    }
    if (use == Use::backward && g->flat->has_secondary())
      g->gather = g->flat->start_secondary_gather(*zeropp_.hpz);
    else if (use == Use::forward && config_.quantized_weights)
      g->gather = g->flat->start_quantized_gather(*g->comm, config_.weight_quantization_block);
    else
      g->gather = g->flat->start_gather(*g->comm);
  }
}

void ZeroOptimizer::prefetch_ahead(size_t u, int direction) {
  const size_t n = units_.size();
  int64_t budget = config_.stage3_prefetch_bucket_size;
  int64_t shards_ahead = 0, shards_here = 0;
  for (Group* g : unit_groups_[u]) shards_here += g->partitioned ? 1 : 0;
  for (size_t k = 1; k < n; ++k) {
    // Forward order is 0, 1, ..., n-1; the backward visits the root unit first, then n-1 down to 1.
    const size_t next = direction > 0 ? u + k : (u >= k ? u - k : u + n - k);
    if (direction > 0 && next >= n) return;
    if (direction < 0 && next == 0 && u != 0) return;
    int64_t elements = 0, shards = 0;
    for (Group* g : unit_groups_[next]) {
      elements += g->partitioned ? g->flat->padded() : 0;
      shards += g->partitioned ? 1 : 0;
    }
    if (k > 1 && elements > budget) return;
    // Offloaded parameters: the shards of this unit and the ones prefetched fit the buffers.
    if (param_swap_ && (shards_ahead += shards) + shards_here > config_.offload_param.buffer_count) return;
    prefetch_unit(next, direction > 0 ? Use::forward : Use::backward);
    budget -= elements;
  }
}

void ZeroOptimizer::gather_unit(size_t u, Use use) {
  prefetch_unit(u, use, /*wait=*/true);
  for (Group* g : unit_groups_[u]) {
    if (!g->gather) continue;
    g->gather->wait();
    g->gather.reset();
    g->flat->finish_gather();
    if (param_swap_) param_swap_->drop(*g->flat);  // the gathered buffer holds it
    if (config_.hpz_partition_size > 1 && g->comm == dp_.get()) {
      // A training forward's gather leaves the secondary shard its backward gathers from;
      // the backward's own gather has used it. (Expert groups gather over edp: Note [ZeRO
      // with experts].)
      if (use == Use::forward && GradMode::enabled())
        g->flat->keep_secondary(zeropp_.hpz->rank(), zeropp_.hpz->size());
      else
        g->flat->drop_secondary();
    }
  }
}

void ZeroOptimizer::release_group(Group& g) {
  if (!g.partitioned) return;
  if (g.gather) {  // a prefetch nobody used: let it land before freeing its buffer
    g.gather->wait();
    g.gather.reset();
  }
  if (param_swap_) param_swap_->drop(*g.flat);  // (or its read)
  if (g.flat->flat().defined()) g.flat->release();
}

void ZeroOptimizer::release_unit(size_t u) {
  if (held_) return;
  for (Group* g : unit_groups_[u]) release_group(*g);
}

void ZeroOptimizer::gather_all() {
  apply_pending_update();
  if (config_.stage != 3) return;
  // (Offloaded parameters: one unit's shards in memory at a time.)
  if (!param_swap_)
    for (size_t u = 0; u < units_.size(); ++u) prefetch_unit(u, Use::whole);
  for (size_t u = 0; u < units_.size(); ++u) gather_unit(u, Use::whole);
  held_ = true;
}

void ZeroOptimizer::release_all() {
  if (config_.stage != 3) return;
  held_ = false;
  for (Group& g : groups_) {
    release_group(g);
    g.flat->drop_secondary();
  }
}

void ZeroOptimizer::begin_backward(bool last) {
  // Deferred: reductions launched by an earlier final backward go on behind this one.
  drain(/*wait_all=*/!config_.defer_reduction);
  last_micro_ = last;
  for (Group& g : groups_) {
    g.ready = 0;
    if (!config_.defer_reduction) g.launched = false;
  }
}

void ZeroOptimizer::begin_final_backward(const std::vector<Tensor>& params) {
  TRIAD_CHECK(config_.defer_reduction, "ZeroOptimizer::begin_final_backward is for pipeline stages (defer_reduction)");
  begin_backward(false);
  for (Group& g : groups_) {
    bool all = true;
    for (const auto& [name, p] : g.flat->params())
      all = all && std::any_of(params.begin(), params.end(), [&](const Tensor& q) { return q.is_same(p); });
    g.final = g.final || all;
  }
}

void ZeroOptimizer::on_grad_ready(Group& g) {
  if (++g.ready < int(g.flat->params().size())) return;
  const bool reduce_now = config_.defer_reduction
                              ? g.final && !g.launched && config_.stage != 1
                              : config_.stage >= 2 || (config_.stage == 0 && last_micro_);
  if (reduce_now && (config_.overlap_comm || config_.stage == 3)) launch(g);
  if (config_.stage == 3) release_group(g);  // its backward is done with the values
  drain(/*wait_all=*/false);
}

void ZeroOptimizer::launch(Group& g) {
  g.launched = true;
  prescale(g.flat->grad());
  if (config_.stage == 0) {
    pending_.push_back({bucketed_all_reduce(*g.comm, g.flat->grad(), config_.reduce_bucket_size), &g, Tensor()});
  } else if (config_.quantized_gradients && g.comm == dp_.get()) {
    Tensor out = Tensor::empty({g.flat->shard_size()}, config_.dtype, g.flat->device());
    pending_.push_back({reducer_->reduce_scatter(g.flat->grad(), out), &g, out});
  } else {
    Tensor out = Tensor::empty({g.flat->shard_size()}, config_.dtype, g.flat->device());
    pending_.push_back({bucketed_reduce_scatter(*g.comm, g.flat->grad(), out, config_.reduce_bucket_size), &g, out});
  }
}

void ZeroOptimizer::prescale(const Tensor& grad) {
  if (config_.gradient_predivide_factor == 1.0 || grad.numel() == 0) return;
  if (grad.dtype() == DType::f32) return ops::mul_(grad, 1.0 / config_.gradient_predivide_factor);
  const Tensor wide = ops::to(grad, DType::f32);  // 16-bit storage: scaled in f32, rounded once
  ops::mul_(wide, 1.0 / config_.gradient_predivide_factor);
  ops::copy_(grad, wide);
}

void ZeroOptimizer::complete(Pending& p) {
  if (!p.result.defined()) return;
  // A stage-2 or -3 gradient reduce-scatter: added to the shard, or to its sub-groups in the
  // store (Note [Offloaded gradients]), which keep the squares of the sums for the norm.
  if (!store_->keeps_gradients()) {
    ops::add_(p.group->shard_grad, p.result);
  } else {
    const bool whole = p.group->subgroups.size() == 1;
    for (Group::SubGroup& sub : p.group->subgroups) {
      const Tensor sum =
          store_->accumulate_gradient(sub.entry, whole ? p.result : ops::narrow(p.result, 0, sub.first, sub.count));
      Tensor unscaled = sum;  // as step() unscales gradients in memory
      if (const double unscale = gradient_unscale(); unscale != 1.0) ops::mul_(unscaled = ops::clone(sum), unscale);
      sub.grad_squares = ops::sum_squares({unscaled});
    }
  }
  p.group->flat->release_grad();
}

void ZeroOptimizer::drain(bool wait_all) {
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (wait_all)
      p.work->wait();
    else if (!p.work->test()) {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
      continue;
    }
    complete(p);
  }
  pending_.resize(kept);
}

bool ZeroOptimizer::StepNorm::skipped() const { return outcome.defined() && outcome.to_vector<double>()[1] != 0.0; }

double ZeroOptimizer::prepare_step(const RatesAt& rates) {
  if (device_scale_) {
    // Every count of steps taken still possible (Note [Loss scale on the device]).
    device_scale_->prepare([&](int64_t taken, const Tensor& rows) {
      const Rates r = rates(taken);
      optim::AdamWOptions o = adamw_;
      if (r.betas) o.beta1 = r.betas->first, o.beta2 = r.betas->second;
      optim::check_betas(o.beta1, o.beta2);
      write_constants(o, r.lr, taken + 1, rows);
      return r.lr;
    });
    return lr_ = NAN;
  }
  const Rates r = rates(steps_);
  if (r.betas) set_betas(r.betas->first, r.betas->second);
  lr_ = r.lr;
  if (!step_constants_.defined()) return lr_;
  // A recorded step: the constants of the next step, queued on the device.
  const Tensor host = Tensor::empty(step_constants_.shape(), DType::f32);
  write_constants(adamw_, lr_, steps_ + 1, host);
  copy_from_host(step_constants_, host);
  return lr_;
}

void ZeroOptimizer::write_constants(const optim::AdamWOptions& o, double lr, int64_t t, const Tensor& rows) const {
  for (size_t i = 0; i < groups_.size(); ++i)
    ops::adamw_constants(optim::adamw_step(o, lr, groups_[i].flat->weight_decay(), t),
                         ops::select(rows, 0, int64_t(i)));
}

ZeroOptimizer::StepNorm ZeroOptimizer::step(double lr, double max_norm) {
  prepare_step([lr](int64_t) { return Rates{lr, std::nullopt}; });
  return step(max_norm);
}

ZeroOptimizer::StepNorm ZeroOptimizer::step(double max_norm) {
  NoGradGuard no_grad;
  if (config_.stage == 3) release_all();  // groups whose gradients never came
  // Reductions the backward did not start (no overlap, unused parameters, stage 1).
  for (Group& g : groups_) {
    if (config_.stage == 0 && !g.launched) launch(g);
    if (config_.stage >= 2 && !g.launched && g.flat->has_grad()) launch(g);
  }
  drain(/*wait_all=*/true);
  if (config_.stage == 1) {
    for (Group& g : groups_) {
      prescale(g.flat->grad());
      pending_.push_back(
          {bucketed_reduce_scatter(*g.comm, g.flat->grad(), g.shard_grad, config_.reduce_bucket_size), &g, Tensor()});
    }
    drain(/*wait_all=*/true);
  }

  for (Group& g : groups_) g.launched = false, g.final = false;  // every reduction is done

  sum_tied_gradients();
  // Average over ranks (what prescale() left of it) and undo the loss scale, in f32; then
  // the global norm.
  const double unscale = device_scale_ ? 1.0 : gradient_unscale();
  std::vector<Tensor> grads;
  for (Group& g : groups_) {
    if (store_->keeps_gradients()) break;  // they stay there (Note [Offloaded gradients])
    const Tensor& stored = config_.stage == 0 ? g.flat->grad() : g.shard_grad;
    Tensor grad = stored.dtype() == DType::f32 ? stored : ops::to(stored, DType::f32);
    if (unscale != 1.0) ops::mul_(grad, unscale);
    grads.push_back(grad);
  }
  if (device_scale_) device_scale_->unscale(grads);
  sum_partial_gradients(grads);
  if (device_scale_) {  // Note [Loss scale on the device]: the verdict stays there too
    const Tensor squared = squared_grad_norm(grads);
    const Tensor outcome = device_scale_->decide(squared);
    if (max_norm > 0) ops::clip_to_norm_(grads, squared, max_norm);
    Update u{.lr = NAN, .adamw = adamw_, .step = ++steps_, .grads = std::move(grads), .params = {}};
    update(u);  // skipped on the device when the gradients overflowed (kAdamWSkip)
    gather_updated();
    clear_gradients();
    return {ops::sqrt(squared), NAN, outcome};
  }
  // Without loss scaling nothing before the update needs the norm on the host: its square
  // stays on the device, clipping reads it there, and the caller reads the norm when it
  // needs it (Note [Host synchronisation in a step] in train/trainer.cpp). Gradients kept by
  // the store have their norm from the sub-groups' squares (Note [Offloaded gradients]).
  const bool scaled = config_.loss_scale.dynamic || config_.loss_scale.static_scale > 0;
  const bool stored = store_->keeps_gradients();
  const Tensor squared = scaled || stored ? Tensor() : squared_grad_norm(grads);
  const double norm = squared.defined() ? NAN : stored ? stored_grad_norm() : grad_norm(grads);
  const auto outcome = [&](bool skipped) {
    return scaled ? Tensor::from_vector(std::vector<double>{lr_, skipped ? 1.0 : 0.0, scaler_.scale()}, {kStepOutcome})
                  : Tensor();
  };
  if (scaled) {
    const bool overflow = !std::isfinite(norm);
    scaler_.update(overflow);
    if (overflow) {
      clear_gradients();
      apply_pending_update();  // Note [Delayed parameter update]: a skipped step ends the delay
      return {Tensor::full({1}, std::numeric_limits<double>::infinity(), DType::f64), lr_, outcome(true)};
    }
  }
  if (!squared.defined())
    optim::clip_grads(grads, norm, max_norm);
  else if (max_norm > 0)
    ops::clip_to_norm_(grads, squared, max_norm);

  Update u{.lr = lr_, .adamw = adamw_, .step = ++steps_, .grads = std::move(grads), .params = {}};
  if (store_->keeps_gradients()) u.unscale = unscale, u.clip = optim::clip_coefficient(norm, max_norm);
  if (config_.delayed_update.enabled && u.step > config_.delayed_update.warmup_steps) {
    apply_pending_update();
    // The thread's own copies: the backward accumulates into the gradients, the forward
    // reads the parameters.
    for (size_t i = 0; i < groups_.size(); ++i) {
      u.params.push_back(ops::clone(param_view(groups_[i])));
      if (u.grads[i].is_same(config_.stage == 0 ? groups_[i].flat->grad() : groups_[i].shard_grad))
        u.grads[i] = ops::clone(u.grads[i]);
    }
    stage_update(u);  // here: the copies come after the ones above (the thread's stream is not this one)
    delayed_.update = std::move(u);
    delayed_.running = std::async(std::launch::async, [this] {
      NoGradGuard no_grad;  // (grad mode is the thread's own)
      update(delayed_.update);
    });
  } else {
    stage_update(u);
    update(u);
    gather_updated();
  }
  clear_gradients();
  return {squared.defined() ? ops::sqrt(squared) : Tensor::full({1}, norm, DType::f64), lr_, outcome(false)};
}

double ZeroOptimizer::gradient_unscale() const {
  return unscale_factor({.predivide = config_.gradient_predivide_factor, .ranks = double(dp_->size())},
                        scaler_.scale());
}

void ZeroOptimizer::clear_gradients() {
  if (store_->keeps_gradients()) {
    store_->clear_gradients();
    for (Group& g : groups_)
      for (Group::SubGroup& sub : g.subgroups) sub.grad_squares = 0;
    return;
  }
  for (Group& g : groups_) ops::zero_(config_.stage <= 1 ? g.flat->grad() : g.shard_grad);
}

void ZeroOptimizer::gather_updated() {
  if (config_.stage == 0) return;
  std::vector<Tensor> sends;
  for (Group& g : groups_) {
    if (g.partitioned) continue;
    sends.push_back(ops::clone(g.flat->shard(g.flat->flat())));
    pending_.push_back(
        {bucketed_all_gather(*g.comm, sends.back(), g.flat->flat(), config_.allgather_bucket_size), &g, Tensor()});
  }
  drain(/*wait_all=*/true);
}

void ZeroOptimizer::apply_pending_update() {
  if (!delayed_.running.valid()) return;
  try {
    delayed_.running.get();
  } catch (...) {
    delayed_.update = {};
    throw;
  }
  for (size_t i = 0; i < groups_.size(); ++i) ops::copy_(param_view(groups_[i]), delayed_.update.params[i]);
  delayed_.update = {};
  gather_updated();
}

ZeroOptimizer::~ZeroOptimizer() {
  if (delayed_.running.valid()) delayed_.running.wait();
}

void ZeroOptimizer::update(const Update& u) {
  // Sub-group by sub-group in order: the store may read the next one while this one is
  // updated, and write it back while the next is (Note [Offloaded optimizer state]).
  // Sub-groups whose state stays on the device go in one call instead (Note [Multi-tensor
  // optimizer]: one launch on a GPU), launched before the next sub-group updated on the host
  // (Note [Partial offload]).
  std::vector<AdamWTensors> batch;
  std::vector<std::pair<size_t, const Group::SubGroup*>> order;
  for (size_t i = 0; i < groups_.size(); ++i)
    for (const Group::SubGroup& sub : groups_[i].subgroups) order.emplace_back(i, &sub);
  // Note [Host optimizer step]: stage_update() has staged the sub-groups updated on the host
  // whose parameters are in memory or updated in place; an offloaded parameter shard's are
  // staged once it is in.
  bool any_host = false;
  // Offloaded parameter shards the update needs on the device (Note [Offloaded parameters]),
  // read in unless it only writes them (mixed precision: the master weights are the store's).
  const auto swapped = [&](size_t i) { return param_swap_ && groups_[i].partitioned && !groups_[i].in_place; };
  const bool reads_params = config_.dtype == DType::f32;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto [i, sub] = order[k];
    Group& g = groups_[i];
    const bool host = store_->updates_on_host(sub->entry), at_once = store_->resident(sub->entry) && !param_swap_;
    any_host = any_host || host;
    if (!at_once && !batch.empty()) {
      ops::adamw_(batch);
      batch.clear();
    }
    if (g.in_place && sub == &g.subgroups.front()) {  // Note [Parameters updated in place]
      const bool idle = param_swap_->settle(*g.flat);
      TRIAD_ASSERT(idle);
    }
    if (swapped(i) && sub == &g.subgroups.front()) {
      if (!reads_params) {
        param_swap_->bring_in_to_overwrite(*g.flat);
      } else {
        param_swap_->bring_in(*g.flat);
        // The next shard the update reads comes in on the I/O thread while this group is updated.
        for (size_t j = i + 1; j < groups_.size(); ++j)
          if (swapped(j)) {
            param_swap_->start_read(*groups_[j].flat);
            break;
          }
      }
    }
    if (host && swapped(i)) store_->stage(sub->entry, update_grad(u, i, *sub), update_params(u, i, *sub));
    const ShardState& state = store_->acquire(sub->entry);
    if (k + 1 < order.size()) store_->prefetch(order[k + 1].second->entry);
    const AdamWStep s = optim::adamw_step(u.adamw, u.lr, g.flat->weight_decay(), u.step);
    const Tensor params = g.in_place ? Tensor() : update_params(u, i, *sub);
    Tensor grad;
    if (store_->keeps_gradients()) {  // scaled here as step() scales gradients in memory
      grad = state.grad;
      if (u.unscale != 1.0) ops::mul_(grad, u.unscale);
      if (u.clip < 1.0) ops::mul_(grad, u.clip);
    } else {
      grad = host ? state.grad : update_grad(u, i, *sub);
    }
    // Mixed precision: the update writes the 16-bit parameters from the master weights itself
    // (on the host into the store's buffer, which release() copies to them, or into their own
    // host buffer: Note [Parameters updated in place]).
    AdamWTensors update =
        state.master.defined()
            ? AdamWTensors{state.master, grad, state.exp_avg, state.exp_avg_sq, host ? state.params : params, s}
            : AdamWTensors{params, grad, state.exp_avg, state.exp_avg_sq, Tensor(), s};
    if (step_constants_.defined()) update.constants = ops::select(step_constants_, 0, int64_t(i));
    if (at_once)
      batch.push_back(update);  // its tensors outlive the release (ShardStore::resident)
    else
      ops::adamw_({update});
    store_->release(sub->entry, /*dirty=*/true);
    if (g.host_params.defined() && sub == &g.subgroups.back()) param_swap_->store_from(*g.flat, g.host_params);
    if (swapped(i) && sub == &g.subgroups.back()) {
      if (any_host) store_->finish_update();  // the shard's new values are in before it is written
      param_swap_->store(*g.flat);
    }
  }
  if (!batch.empty()) ops::adamw_(batch);
  if (any_host) store_->finish_update();
  // The next step begins where this one did: its first sub-group can come in during the
  // forward and backward.
  if (!order.empty()) store_->prefetch(order.front().second->entry);
}

void ZeroOptimizer::stage_update(const Update& u) {
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Group& g = groups_[i];
    if (!param_swap_ || !g.partitioned || g.in_place)
      for (const Group::SubGroup& sub : g.subgroups)
        if (store_->updates_on_host(sub.entry))
          store_->stage(sub.entry, update_grad(u, i, sub), g.in_place ? Tensor() : update_params(u, i, sub));
  }
}

Tensor ZeroOptimizer::update_params(const Update& u, size_t group, const Group::SubGroup& sub) {
  const Tensor target = u.params.empty() ? param_view(groups_[group]) : u.params[group];
  return groups_[group].subgroups.size() == 1 ? target : ops::narrow(target, 0, sub.first, sub.count);
}

Tensor ZeroOptimizer::update_grad(const Update& u, size_t group, const Group::SubGroup& sub) const {
  const Tensor& grad = u.grads[group];
  return groups_[group].subgroups.size() == 1 ? grad : ops::narrow(grad, 0, sub.first, sub.count);
}

namespace {

ShardPart part_of(ZeroOptimizer::State state) {
  TRIAD_ASSERT(state != ZeroOptimizer::State::param);
  return state == ZeroOptimizer::State::master    ? ShardPart::master
         : state == ZeroOptimizer::State::exp_avg ? ShardPart::exp_avg
                                                  : ShardPart::exp_avg_sq;
}

}  // namespace

std::pair<Tensor, int64_t> ZeroOptimizer::buffer(const Group& g, State state) {
  if (state == State::param || (state == State::master && config_.dtype == DType::f32)) {  // f32: the parameters are the master weights
    if (param_swap_ && g.partitioned) param_swap_->bring_in(*g.flat, /*bounded=*/false);
    return g.partitioned ? std::pair(g.flat->owned_shard(), g.flat->shard_begin()) : std::pair(g.flat->flat(), 0l);
  }
  const int64_t begin = config_.stage == 0 ? 0 : g.flat->shard_begin();
  if (g.subgroups.size() == 1) return {store_->read_part(g.subgroups[0].entry, part_of(state)), begin};
  Tensor whole;  // the sub-groups' parts side by side
  for (const Group::SubGroup& sub : g.subgroups) {
    const Tensor part = store_->read_part(sub.entry, part_of(state));
    const Group::SubGroup& last = g.subgroups.back();
    if (!whole.defined()) whole = Tensor::empty({last.first + last.count}, DType::f32, part.device());
    ops::copy_(ops::narrow(whole, 0, sub.first, sub.count), ops::to(part, whole.device()));  // (Note [Partial offload])
  }
  return {whole, begin};
}

ZeroOptimizer::StateView ZeroOptimizer::state_view(State state) {
  apply_pending_update();
  return StateView(*this, state, 0, groups_.size());
}

std::vector<ZeroOptimizer::ViewBatch> ZeroOptimizer::view_batches() const {
  std::vector<ViewBatch> out;
  const bool offloaded = param_swap_ || config_.offload_optimizer.device == OffloadDevice::nvme;
  const auto elements = [&](const Group& g) { return config_.stage == 0 ? g.flat->padded() : g.flat->shard_size(); };
  int64_t largest = 0;
  for (const Group& g : groups_) largest = std::max(largest, elements(g));
  int64_t in_batch = 0;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const int64_t n = elements(groups_[i]);
    if (out.empty() || (offloaded && in_batch + n > largest)) {
      out.push_back({i, i, {}});
      in_batch = 0;
    }
    out.back().end = i + 1;
    in_batch += n;
    for (const auto& [name, _] : groups_[i].flat->params()) out.back().params.push_back(name);
  }
  return out;
}

ZeroOptimizer::StateView ZeroOptimizer::state_view(State state, const ViewBatch& batch) {
  TRIAD_ASSERT(batch.first <= batch.end && batch.end <= groups_.size());
  apply_pending_update();
  return StateView(*this, state, batch.first, batch.end);
}

ZeroOptimizer::StateView::StateView(ZeroOptimizer& zero, State state, size_t first, size_t end)
    : zero_(&zero), state_(state), first_group_(first) {
  for (size_t i = first; i < end; ++i) buffers_.push_back(zero.buffer(zero.groups_[i], state));
}

ZeroOptimizer::StateView::StateView(StateView&& other) noexcept
    : zero_(other.zero_), state_(other.state_), first_group_(other.first_group_), buffers_(std::move(other.buffers_)) {
  other.buffers_.clear();
}

ZeroOptimizer::StateView::~StateView() {
  if (!zero_->param_swap_ || !(state_ == State::param || (state_ == State::master && zero_->config_.dtype == DType::f32)))
    return;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Group& g = zero_->groups_[first_group_ + i];
    if (g.partitioned) zero_->param_swap_->drop(*g.flat);  // what commit() did not store is dropped
  }
}

void ZeroOptimizer::StateView::commit() {
  if (state_ == State::param || (state_ == State::master && zero_->config_.dtype == DType::f32)) {
    if (zero_->param_swap_)
      for (size_t i = 0; i < buffers_.size(); ++i) {
        Group& g = zero_->groups_[first_group_ + i];
        if (g.partitioned) zero_->param_swap_->store(*g.flat);
      }
    return;
  }
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Group& g = zero_->groups_[first_group_ + i];
    const Tensor& storage = buffers_[i].first;
    for (const Group::SubGroup& sub : g.subgroups)
      zero_->store_->write_part(sub.entry, part_of(state_),
                                g.subgroups.size() == 1 ? storage : ops::narrow(storage, 0, sub.first, sub.count));
  }
}

std::vector<ZeroOptimizer::Slice> ZeroOptimizer::StateView::slices(bool owned) const {
  std::vector<Slice> out;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Group& g = zero_->groups_[first_group_ + i];
    const auto& [storage, storage_begin] = buffers_[i];
    TRIAD_CHECK(storage.defined(), "ZeRO: the parameters are released; checkpoints read them between steps");
    const int64_t begin = owned ? g.flat->shard_begin() : storage_begin;
    const int64_t end = owned ? begin + g.flat->shard_size() : storage_begin + storage.numel();
    for (const FlatGroup::Piece& piece : g.flat->pieces(begin, end)) {
      const auto& [name, param] = g.flat->params()[piece.param];
      out.push_back(
          {name, param.shape(), piece.first, ops::narrow(storage, 0, piece.flat_offset - storage_begin, piece.count)});
    }
  }
  return out;
}

void ZeroOptimizer::set_betas(double beta1, double beta2) {
  optim::check_betas(beta1, beta2);
  adamw_.beta1 = beta1;
  adamw_.beta2 = beta2;
}

void ZeroOptimizer::read_constants_from_device() {
  TRIAD_CHECK(updates_on_device(),
              "ZeRO: a recorded step reads Adam's constants on the device, where offloaded optimizer "
              "state or parameters are not updated (zero_optimization.offload_optimizer, offload_param)");
  TRIAD_CHECK(!config_.delayed_update.enabled,
              "ZeRO: a recorded step cannot delay the update (zero_optimization.delayed_update)");
  if (!step_constants_.defined())  // (the loss scale on the device has them already)
    step_constants_ = Tensor::empty({int64_t(groups_.size()), kAdamWConstants}, DType::f32, device_);
}

void ZeroOptimizer::count_replayed_step() {
  ++steps_;
  if (device_scale_) device_scale_->count_replayed();
}

double ZeroOptimizer::loss_scale() const { return device_scale_ ? device_scale_->read().scale.scale : scaler_.scale(); }

Tensor ZeroOptimizer::loss_seed(double divisor, DType dtype) const {
  return device_scale_ ? device_scale_->seed(divisor, dtype)
                       : Tensor::full({}, scaler_.scale() / divisor, dtype, device_);
}

ZeroOptimizer::Counters ZeroOptimizer::counters() const {
  if (!device_scale_) return {steps_, scaler_.state()};
  const DeviceLossScale::Counters c = device_scale_->read();
  return {c.taken, c.scale};
}

void ZeroOptimizer::set_counters(const Counters& c) {
  TRIAD_CHECK(c.steps >= 0, "ZeRO: invalid optimizer counters (steps " << c.steps << ")");
  apply_pending_update();
  scaler_.set_state(c.loss_scale);
  steps_ = c.steps;
  if (device_scale_) device_scale_->write({c.steps, scaler_.state()});
}

Tensor ZeroOptimizer::param_view(Group& g) const {
  if (config_.stage == 0) return g.flat->flat();
  return g.partitioned ? g.flat->owned_shard() : g.flat->shard(g.flat->flat());
}

void ZeroOptimizer::sum_tied_gradients() {
  for (Group& g : groups_)
    if (g.tie && g.tie->size() > 1) g.tie->all_reduce(config_.stage == 0 ? g.flat->grad() : g.shard_grad)->wait();
}

std::vector<ZeroOptimizer::GradPiece> ZeroOptimizer::grad_pieces(const std::vector<Tensor>& grads) const {
  std::vector<GradPiece> out;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const FlatGroup& flat = *groups_[i].flat;
    const int64_t begin = config_.stage == 0 ? 0 : flat.shard_begin();
    for (const FlatGroup::Piece& piece : flat.pieces(begin, begin + grads[i].numel()))
      out.push_back({i, ops::narrow(grads[i], 0, piece.flat_offset - begin, piece.count), groups_[i].splits[piece.param]});
  }
  return out;
}

void ZeroOptimizer::sum_partial_gradients(const std::vector<Tensor>& grads) {
  if (!tp_ || tp_->size() == 1) return;
  std::vector<Tensor> partial;
  for (const GradPiece& p : grad_pieces(grads))
    if (p.split.partial_grad) partial.push_back(p.grad);
  if (partial.empty()) return;
  int64_t total = 0;
  for (const Tensor& t : partial) total += t.numel();
  const Tensor packed = Tensor::empty({total}, DType::f32, device_);
  int64_t at = 0;
  for (const Tensor& t : partial) ops::copy_(ops::narrow(packed, 0, at, t.numel()), t), at += t.numel();
  tp_->all_reduce(packed)->wait();
  at = 0;
  for (const Tensor& t : partial) ops::copy_(t, ops::narrow(packed, 0, at, t.numel())), at += t.numel();
}

bool ZeroOptimizer::counted_in_norm(size_t group) const {
  const Group& g = groups_[group];
  return (!g.tie || g.tie->rank() == 0) && (!replicated_experts() || g.comm->rank() == 0);
}

double ZeroOptimizer::grad_norm(const std::vector<Tensor>& grads) const {
  // The host waits for the device here (Note [Host synchronisation in a step] in
  // train/trainer.cpp). The sum is the same on every rank (the all-reduce gives every rank
  // the same bits), so every rank reaches the same verdict.
  return std::sqrt(squared_grad_norm(grads).item());
}

double ZeroOptimizer::stored_grad_norm() const {
  // Gradients kept by the store (stages 2 and 3, without tensor parallelism or pipeline
  // stages: the constructor) are no tied, partial or replicated ones: each rank counts all
  // of its own shard, summed over dp.
  double sq = 0;
  for (const Group& g : groups_)
    for (const Group::SubGroup& sub : g.subgroups) sq += sub.grad_squares;
  Tensor total = Tensor::full({1}, sq, DType::f64, device_);
  dp_->all_reduce(total)->wait();
  return std::sqrt(total.item());
}

Tensor ZeroOptimizer::squared_grad_norm(const std::vector<Tensor>& grads) const {
  const bool split_model = tp_ && tp_->size() > 1, pipelined = pipeline_.pp && pipeline_.pp->size() > 1;
  std::vector<Tensor> counted;
  if (!split_model) {
    for (size_t i = 0; i < groups_.size(); ++i)
      if (counted_in_norm(i)) counted.push_back(grads[i]);
  } else {
    // Note [ZeRO under tensor parallelism]: split parameters count on every tp rank,
    // replicated ones on tp rank 0.
    for (const GradPiece& p : grad_pieces(grads))
      if (counted_in_norm(p.group) && (p.split.is_split() || tp_->rank() == 0)) counted.push_back(p.grad);
  }
  Tensor total = ops::squared_norm(counted, device_);
  // Every rank holds the whole gradient at stage 0 (without experts spread); otherwise the
  // ranks' sums add up.
  if (config_.stage >= 1 || replicated_experts()) dp_->all_reduce(total)->wait();
  if (split_model) tp_->all_reduce(total)->wait();
  if (pipelined) pipeline_.pp->all_reduce(total)->wait();
  return total;
}

std::vector<std::pair<int64_t, bool>> ZeroOptimizer::group_sizes() const {
  std::vector<std::pair<int64_t, bool>> out;
  for (const Group& g : groups_) out.emplace_back(g.flat->padded(), g.partitioned);
  return out;
}

ResidentBytes ZeroOptimizer::memory() const {
  ResidentBytes m;
  const int64_t elt = int64_t(element_size(config_.dtype));
  m.optim_bytes = store_->device_bytes();
  m.host_bytes = store_->host_bytes() + (param_swap_ ? param_swap_->host_bytes() : 0);
  m.nvme_bytes = store_->file_bytes() + (param_swap_ ? param_swap_->file_bytes() : 0);
  int64_t swapped = 0, largest = 0;  // offloaded parameter shards: all of them, and the largest
  for (const Group& g : groups_) {
    const int64_t full = g.flat->padded(), shard = g.flat->shard_size();
    if (param_swap_ && g.partitioned) {
      swapped += shard * elt;
      largest = std::max(largest, shard * elt);
    } else {
      m.param_bytes += (g.partitioned ? shard : full) * elt;
    }
    if (g.partitioned && config_.hpz_partition_size > 1 && g.comm == dp_.get()) m.param_bytes += full / config_.hpz_partition_size * elt;
    if (!store_->keeps_gradients())  // else they are in the store (Note [Offloaded gradients])
      m.grad_bytes += (config_.stage <= 1 || config_.defer_reduction ? full : shard) * elt;
    // Note [Delayed parameter update]: the pending update's copies of the parameters it
    // updates and of their f32 gradient.
    if (config_.delayed_update.enabled) m.buffer_bytes += (config_.stage == 0 ? full : shard) * (elt + 4);
  }
  m.param_bytes += std::min(swapped, config_.offload_param.buffer_count * largest);
  // Note [Parameters updated in place]: the host buffers the update writes for a file, in
  // place of the store's own (counted as the store counts its memory).
  for (const Group& g : groups_)
    if (g.host_params.defined()) (device_.is_cpu() ? m.optim_bytes : m.host_bytes) += int64_t(g.host_params.nbytes());
  return m;
}

}  // namespace triad::zero
