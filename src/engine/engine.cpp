#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "cuda/nccl_communicator.h"
#include "optim/deepspeed_schedules.h"
#include "cuda/runtime.h"
#include "config/model_factory.h"
#include "nn/pipeline_partition.h"
#include "nn/router_loss.h"
#include "optim/clip.h"
#include "parallel/runtime.h"
#include "parallel/self_communicator.h"
#include "parallel/tensor_parallel_layers.h"
#include "parallel/watchdog.h"
#include "tensor/random.h"

namespace triad::engine {

namespace {

std::unique_ptr<optim::Optimizer> make_sgd(const OptimizerConfig& o, const std::vector<Tensor>& params) {
  return std::make_unique<optim::SGD>(std::vector<optim::ParamGroup>{{params, o.weight_decay}},
                                      optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .nesterov = o.nesterov});
}

std::unique_ptr<optim::LRSchedule> make_schedule(const SchedulerConfig& s, double lr) {
  namespace ds = optim::deepspeed;
  const ds::WarmupType warmup = ds::parse_warmup_type(s.warmup_type);
  if (s.type == "WarmupLR") return std::make_unique<ds::WarmupLR>(s.warmup_min_lr, s.warmup_max_lr, s.warmup_num_steps, warmup);
  if (s.type == "WarmupDecayLR")
    return std::make_unique<ds::WarmupDecayLR>(s.warmup_min_lr, s.warmup_max_lr, s.warmup_num_steps, s.total_num_steps,
                                               warmup);
  if (s.type == "WarmupCosineLR")
    return std::make_unique<ds::WarmupCosineLR>(lr, s.total_num_steps, s.warmup_min_ratio, s.warmup_num_steps,
                                                s.cos_min_ratio, warmup);
  if (s.type == "OneCycle")
    return std::make_unique<ds::OneCycle>(
        s.cycle_min_lr, s.cycle_max_lr, s.decay_lr_rate,
        ds::CycleShape{s.cycle_first_step_size, s.cycle_second_step_size, s.cycle_first_stair_count,
                       s.cycle_second_stair_count},
        s.decay_step_size,
        s.cycle_momentum ? std::optional(ds::MomentumCycle{s.cycle_min_mom, s.cycle_max_mom, s.decay_mom_rate})
                         : std::nullopt);
  if (s.type == "LRRangeTest")
    return std::make_unique<ds::LRRangeTest>(s.lr_range_test_min_lr, s.lr_range_test_step_size,
                                             s.lr_range_test_step_rate, s.lr_range_test_staircase);
  return std::make_unique<optim::ConstantLR>(lr, s.warmup_num_steps);
}

}  // namespace

uint64_t dropout_seed(uint64_t seed, int rank, int64_t step) {
  return random_bits(seed ^ 0x64726f706f7574ull, (uint64_t(rank) << 40) ^ uint64_t(step));
}

uint64_t tensor_parallel_seed(uint64_t seed, int dp_rank, int tp_rank, int64_t step) {
  return dropout_seed(seed ^ 0x74656e736f72ull, (dp_rank << 16) ^ tp_rank, step);
}

Device training_device(const std::string& device) {
  Device d;
  try {
    d = Device::parse(device);
  } catch (const Error& e) {
    throw Error(std::string("[config] device: ") + e.what());
  }
  if (d.is_cpu()) return d;
  TRIAD_CHECK(cuda::built(), "[config] device \""
                                 << device << "\": this build of triad has no CUDA backend (configure it with "
                                 << "TRIAD_CUDA=ON on a machine with nvcc), so it trains on the cpu only");
  const int n = cuda::device_count();
  TRIAD_CHECK(n > 0, "[config] device \"" << device << "\": no CUDA device is visible to this process (check the "
                                          << "driver, and CUDA_VISIBLE_DEVICES if it is set)");
  if (device == "cuda") return Device::cuda(parallel::rank_on_node() % n);
  TRIAD_CHECK(d.index < n, "[config] device \"" << device << "\": only " << n << " CUDA device"
                                                << (n == 1 ? " is" : "s are") << " visible (cuda:0 to cuda:" << n - 1
                                                << ")");
  return d;
}

std::string shared_gpu(parallel::Communicator* dp, Device device) {
  if (!dp || dp->size() == 1 || !device.is_cuda()) return "";
  const Tensor mine = Tensor::from_vector(std::vector<int64_t>{parallel::node_id(), device.index}, {2});
  const Tensor all = Tensor::empty({2 * dp->size()}, DType::i64);
  dp->all_gather(mine, all)->wait();
  const std::vector<int64_t> v = all.to_vector<int64_t>();
  for (int i = 0; i < dp->size(); ++i)
    for (int j = i + 1; j < dp->size(); ++j)
      if (v[2 * i] == v[2 * j] && v[2 * i + 1] == v[2 * j + 1])
        return "ranks " + std::to_string(i) + " and " + std::to_string(j) + " both train on cuda:" +
               std::to_string(v[2 * i + 1]) + " of one node";
  return "";
}

DistributedBackend resolve_distributed_backend(const std::string& backend, Device device, int ranks,
                                               const std::string& shared) {
  if (backend == "mpi") return DistributedBackend::mpi;
  if (backend == "auto")
    return device.is_cuda() && cuda::nccl_built() && ranks > 1 && shared.empty() ? DistributedBackend::nccl
                                                                                  : DistributedBackend::mpi;
  TRIAD_CHECK(backend == "nccl",
              "[config] distributed_backend must be one of \"auto\", \"mpi\" or \"nccl\", got \"" << backend << "\"");
  TRIAD_CHECK(device.is_cuda(), "[config] distributed_backend \"nccl\": the device is "
                                    << device.str() << ", and NCCL communicates between GPUs (set device to cuda, "
                                    << "or distributed_backend to mpi or auto)");
  TRIAD_CHECK(cuda::nccl_built(), "[config] distributed_backend \"nccl\": this build of triad has no NCCL "
                                      << "communicator (it needs the CUDA backend and NCCL: nccl.h and libnccl under "
                                      << "the CUDA toolkit or NCCL_HOME); use mpi or auto");
  TRIAD_CHECK(shared.empty(), "[config] distributed_backend \"nccl\": "
                                  << shared << ", and NCCL needs a GPU per rank (start at most as many ranks per node "
                                  << "as it has GPUs, or use mpi or auto, which share a GPU through host memory)");
  return DistributedBackend::nccl;
}

GridPtr process_grid(const TrainConfig& c, parallel::CommunicatorPtr world) {
  if (!world) world = std::make_shared<parallel::SelfCommunicator>();
  const int n = world->size();
  TRIAD_CHECK(int64_t(c.tensor_parallel) * c.pipeline.stages * c.data_parallel == n,
              "[config] model.tensor_parallel " << c.tensor_parallel << " x pipeline.stages " << c.pipeline.stages
                                                << " x " << c.data_parallel << " data-parallel ranks does not match "
                                                << "the job's " << n << " ranks");
  if (n > 1) parallel::set_comm_timeout(c.comm_timeout);  // every program's groups come from here
  const int64_t per_node = c.emulated_ranks_per_node;
  TRIAD_CHECK(per_node == 0 || per_node >= n || n % per_node == 0,
              "[config] cluster.ranks_per_node " << per_node << " must divide the job's " << n
                                                 << " ranks (or be at least that many: one node)");
  return std::make_shared<const parallel::ProcessGrid>(
      std::move(world), parallel::GridLayout{.tp = c.tensor_parallel,
                                             .dp = int(c.data_parallel),
                                             .pp = c.pipeline.stages,
                                             .ep = int(c.expert_parallel),
                                             .hpz = c.zero.hpz_partition_size,
                                             .ranks_per_node = int(std::min<int64_t>(per_node, n))});
}

Engine::Engine(const TrainConfig& config, GridPtr grid) : Engine(config, std::nullopt, nullptr, std::move(grid)) {}

Engine::Engine(const TrainConfig& config, nn::LayerList layers, GridPtr grid)
    : Engine(config, std::optional(std::move(layers)), nullptr, std::move(grid)) {}

Engine::Engine(const TrainConfig& config, const ModelBuilder& build, GridPtr grid)
    : Engine(config, std::nullopt, build, std::move(grid)) {}

Engine::Engine(const TrainConfig& config, std::optional<nn::LayerList> user_layers, const ModelBuilder& build,
               GridPtr grid)
    : config_(config),
      device_(training_device(config_.device)),
      grid_(grid ? std::move(grid)
                 : std::make_shared<const parallel::ProcessGrid>(std::make_shared<parallel::SelfCommunicator>(),
                                                                 parallel::GridLayout{.ranks_per_node = 1})) {
  join_groups();
  build_model(std::move(user_layers), build);
  model_->to(device_);
  start_pipeline();
  schedule_ = make_schedule(config_.scheduler, config_.optimizer.lr);
  seed_generators();
  make_optimizer();
}

void Engine::join_groups() {
  dp_ = grid_->dp(), tp_ = grid_->tp(), pp_ = grid_->pp();
  TRIAD_CHECK(pp_->size() == config_.pipeline.stages,
              "Engine: the pipeline group has " << pp_->size() << " ranks but pipeline.stages is "
                                                << config_.pipeline.stages);
  TRIAD_CHECK(tp_->size() == config_.tensor_parallel,
              "Engine: the tensor-parallel group has " << tp_->size() << " ranks but model.tensor_parallel is "
                                                       << config_.tensor_parallel);
  TRIAD_CHECK(grid_->hpz_size() == config_.zero.hpz_partition_size,
              "Engine: the grid's hpZ partitions have " << grid_->hpz_size() << " ranks but "
                                                        << "zero_optimization.zero_hpz_partition_size is "
                                                        << config_.zero.hpz_partition_size
                                                        << " (engine::process_grid lays a config's grid out)");
  // Each axis talks over NCCL where its ranks have a GPU each (distributed_backend auto or
  // nccl), else over MPI (device tensors staged through host memory).
  if (tp_->size() > 1) {
    const DistributedBackend tp_backend =
        resolve_distributed_backend(config_.distributed_backend, device_, tp_->size(), shared_gpu(tp_.get(), device_));
    if (tp_backend == DistributedBackend::nccl) tp_ = cuda::make_nccl_communicator(tp_, device_.index);
    tp_ = tp_comm_ = std::make_shared<parallel::CountingCommunicator>(tp_);
  }
  zero_backend_ =
      resolve_distributed_backend(config_.distributed_backend, device_, dp_->size(), shared_gpu(dp_.get(), device_));
  if (pp_->size() > 1) pp_ = pp_comm_ = std::make_shared<parallel::CountingCommunicator>(pp_);
  TRIAD_CHECK(grid_->ep_size() == config_.expert_parallel, "Engine: the expert-parallel group has "
                                                               << grid_->ep_size() << " ranks but "
                                                               << "model.moe.expert_parallel_size is "
                                                               << config_.expert_parallel
                                                               << " (engine::process_grid lays a config's grid out)");
  // The experts' all-to-alls go over MPI (device tensors staged through host memory).
  ep_ = grid_->ep();
  if (ep_->size() > 1) ep_ = ep_comm_ = std::make_shared<parallel::CountingCommunicator>(ep_);
}

void Engine::build_model(std::optional<nn::LayerList> user_layers, const ModelBuilder& build) {
  const std::shared_ptr<const nn::Parallelism> par = parallel::layer_parallelism(tp_, config_.sequence_parallel, ep_);
  TRIAD_CHECK(!build || pp_->size() == 1, "[config] pipeline.stages " << pp_->size() << ": a built model (RLHF's "
                                         << "models) is held whole by each rank; train it without pipeline stages");
  if (build) {  // Note [Built models]
    model_ = build(par);
    TRIAD_CHECK(model_, "Engine: the model builder returned no model");
    lm_ = std::dynamic_pointer_cast<nn::LanguageModel>(model_);
  } else if (user_layers) {  // Note [User layer lists]
    TRIAD_CHECK(!config_.model.activation_checkpointing,
                "[config] model.activation_checkpointing applies to the GPT; a model given as a list of layers "
                "recomputes them by pipeline.activation_checkpoint_interval");
    TRIAD_CHECK(!user_layers->layers.empty() && user_layers->loss,
                "Engine: a model given as a list of layers needs at least one layer and a loss");
    layers_ = std::move(*user_layers);
  } else if (pp_->size() > 1 || config_.arch == "llama") {
    // The Llama trains as its layer list in one process too: each block a ZeRO unit by name.
    layers_ = model_layers(config_, par);
  }
  if (!layers_.layers.empty()) {
    build_pipeline_stage();
    model_ = stage_;
  } else if (!model_) {
    model_ = lm_ = std::make_shared<nn::GPT>(config_.model, par);
  }
}

void Engine::start_pipeline() {
  if (pp_->size() > 1)
    pipe_ = std::make_unique<parallel::PipelineExecutor>(stage_, pp_,
                                                         parallel::parse_pipe_schedule(config_.pipeline.schedule));
}

void Engine::seed_generators() {
  default_generator().manual_seed(dropout_seed(config_.seed, dp_->rank(), 0));
  tensor_parallel_generator().manual_seed(tensor_parallel_seed(config_.seed, dp_->rank(), tp_->rank(), 0));
}

zero::ZeroConfig Engine::zero_config() const {
  zero::ZeroConfig z = config_.zero;
  z.dtype = config_.precision.dtype;
  z.loss_scale = config_.precision.loss_scale();
  z.gradient_predivide_factor = config_.prescale_gradients ? double(dp_->size()) : config_.gradient_predivide_factor;
  z.defer_reduction = pipe_ != nullptr;
  return z;
}

void Engine::make_optimizer() {
  const OptimizerConfig& o = config_.optimizer;
  if (o.type == "AdamW") {
    TRIAD_CHECK(!config_.model.activation_checkpointing || config_.zero.stage <= 2,
                "[config] model.activation_checkpointing cannot be combined with zero_optimization.stage 3");
    TRIAD_CHECK(config_.pipeline.activation_checkpoint_interval == 0 || config_.zero.stage <= 2,
                "[config] pipeline.activation_checkpoint_interval cannot be combined with zero_optimization.stage 3");
    std::vector<std::string> tied_modules;
    zero::PipelinePlacement placement = pipeline_placement(tied_modules);
    const std::vector<int> nodes = grid_->dp_nodes();
    // One data-parallel rank (alone, or `mpirun -np 1`): ZeRO's collectives are copies on the
    // device, never an MPI call staged through the host nor an NCCL launch polled by its
    // watchdog, either of which a recorded step could not hold (Note [Recorded steps]).
    const parallel::CommunicatorPtr zero_group = dp_->size() == 1 ? std::make_shared<parallel::SelfCommunicator>()
                                                 : zero_backend_ == DistributedBackend::nccl
                                                     ? cuda::make_nccl_communicator(dp_, device_.index)
                                                     : dp_;
    comm_ = std::make_shared<parallel::CountingCommunicator>(zero_group, nodes);
    const zero::ZeroPlusPlusGroups zeropp = zeropp_groups(nodes);
    zero::ExpertPlacement experts;  // Note [ZeRO with experts]: counted with ZeRO's traffic
    if (ep_->size() > 1)
      experts.edp = comm_->counting_alongside(zero_backend_ == DistributedBackend::nccl
                                                  ? cuda::make_nccl_communicator(grid_->edp(), device_.index)
                                                  : grid_->edp());
    zero_ = std::make_unique<zero::ZeroOptimizer>(
        model_,
        zero_config(),
        optim::AdamWOptions{.lr = o.lr,
                            .beta1 = o.beta1,
                            .beta2 = o.beta2,
                            .eps = o.eps,
                            .adam_w_mode = o.adam_w_mode,
                            .bias_correction = o.bias_correction},
        o.weight_decay, comm_, wrap_policy(tied_modules), tp_, std::move(placement), zeropp, experts);
  } else {
    TRIAD_CHECK(dp_->size() == 1 && tp_->size() == 1 && pp_->size() == 1 && config_.zero.stage == 0 &&
                    config_.precision.dtype == DType::f32,
                "[config] optimizer.type \"" << o.type << "\" runs in one process in f32 only (data parallelism, "
                                             << "ZeRO and mixed precision run AdamW)");
    optimizer_ = make_sgd(o, model_->parameters());
  }
}

zero::ZeroPlusPlusGroups Engine::zeropp_groups(const std::vector<int>& nodes) {
  const zero::ZeroConfig& z = config_.zero;
  zero::ZeroPlusPlusGroups g;
  if (!z.quantized_weights && !z.quantized_gradients && z.hpz_partition_size == 1) return g;
  // ZeRO++'s groups carry what ZeRO's own group does: over NCCL when ZeRO's is.
  const auto on_backend = [&](const parallel::CommunicatorPtr& group) {
    return zero_backend_ == DistributedBackend::nccl ? cuda::make_nccl_communicator(group, device_.index) : group;
  };
  const int d = grid_->dp_rank(), h = grid_->hpz_size();
  std::vector<int> hpz_nodes(nodes.begin() + (d / h) * h, nodes.begin() + (d / h + 1) * h);
  g.hpz = comm_->counting_alongside(on_backend(grid_->hpz()), hpz_nodes);
  g.intra = comm_->counting_alongside(on_backend(grid_->intra_node()));  // one node
  std::vector<int> distinct(size_t(grid_->inter_node()->size()));
  for (size_t i = 0; i < distinct.size(); ++i) distinct[i] = int(i);
  g.inter = comm_->counting_alongside(on_backend(grid_->inter_node()), distinct);  // one rank per node
  return g;
}

void Engine::build_pipeline_stage() {
  if (pp_->size() == 1) {  // a list in one process: all of it, as one chunk
    bounds_ = {0, int(layers_.layers.size())};
    stage_ = std::make_shared<nn::PipelineStage>(layers_, std::vector<nn::LayerRange>{{0, bounds_[1]}},
                                                 config_.pipeline.activation_checkpoint_interval);
    return;
  }
  const PipelineConfig& pc = config_.pipeline;
  const parallel::PipeSchedule schedule = parallel::parse_pipe_schedule(pc.schedule);
  parallel::check_pipe_schedule(schedule, pc.stages, int(config_.gradient_accumulation_steps), pc.virtual_stages);
  std::vector<nn::LayerInfo> infos;
  for (const nn::LayerSpec& l : layers_.layers) infos.push_back({l.type, l.parameters});
  bounds_ = nn::partition_layers(infos, pc.stages * pc.virtual_stages, pc.partition);
  std::vector<nn::LayerRange> chunks;
  for (int c = 0; c < pc.virtual_stages; ++c) {
    const int vs = c * pc.stages + pp_->rank();
    chunks.push_back({bounds_[size_t(vs)], bounds_[size_t(vs) + 1]});
  }
  stage_ = std::make_shared<nn::PipelineStage>(layers_, chunks, pc.activation_checkpoint_interval);
}

zero::WrapPolicy Engine::wrap_policy(const std::vector<std::string>& tied_modules) const {
  zero::WrapPolicy policy{.module_types = {"Block", "LlamaBlock"}, .module_names = tied_modules};
  if (!stage_) return policy;
  for (int c = 0; c < stage_->chunks(); ++c)
    for (int i = stage_->range(c).first; i < stage_->range(c).last; ++i)
      if (!layers_.layers[size_t(i)].name.empty()) policy.module_names.push_back(layers_.layers[size_t(i)].name);
  return policy;
}

zero::PipelinePlacement Engine::pipeline_placement(std::vector<std::string>& tied_modules) {
  zero::PipelinePlacement placement;
  if (!pipe_) return placement;
  placement.pp = pp_;
  const PipelineConfig& pc = config_.pipeline;
  // Which pipeline ranks hold each tied module: those holding a layer that uses it. Every
  // rank computes the same answer and joins every group (collective over pp).
  for (const nn::TiedSpec& tied : layers_.tied) {
    std::vector<bool> holds(size_t(pc.stages), false);
    for (int vs = 0; vs < pc.stages * pc.virtual_stages; ++vs)
      for (int i = bounds_[size_t(vs)]; i < bounds_[size_t(vs) + 1]; ++i)
        for (const std::string& key : layers_.layers[size_t(i)].ties)
          if (key == tied.key) holds[size_t(vs % pc.stages)] = true;
    std::vector<int> stages;
    for (int s = 0; s < pc.stages; ++s)
      if (holds[size_t(s)]) stages.push_back(s);
    const parallel::CommunicatorPtr held = grid_->tied_group(stages);
    if (!held) continue;
    const parallel::CommunicatorPtr group = pp_comm_->counting_alongside(held);  // counted with pp
    tied_modules.push_back(tied.key);
    zero::PipelinePlacement::Tie tie{.params = {}, .group = group};
    for (const auto& [name, _] : stage_->named_parameters())
      if (name.starts_with(tied.key + ".")) {
        tie.params.push_back(name);
        if (group->rank() != 0) tied_copies_.insert(name);
      }
    placement.ties.push_back(std::move(tie));
  }
  return placement;
}

Tensor Engine::forward(const Tensor& inputs, const Tensor& targets) {
  TRIAD_CHECK(!pipe_, "Engine::forward: with pipeline parallelism a step runs through forward_backward()");
  model_->train();
  return loss_of(inputs, targets);
}

Tensor Engine::loss_of(const Tensor& inputs, const Tensor& targets) {
  const Tensor x = ops::to(inputs, device_), y = ops::to(targets, device_);
  TRIAD_CHECK(lm_ || stage_, "Engine: the built model " << model_->type_name() << " is not a language model and has "
                                                         << "no loss of its own; run its forward and call backward()");
  return lm_ ? lm_->loss(x, y) : stage_->forward_loss(0, x, y);
}

Tensor Engine::forward_backward(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets) {
  return forward_backward(inputs, targets, {});
}

Tensor Engine::forward_backward(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                                const PipelineLoss& loss) {
  TRIAD_CHECK(pipe_, "Engine::forward_backward runs a pipeline (pipeline.stages > 1); in one stage a step is "
                     "forward() and backward() per micro-batch");
  TRIAD_CHECK(int64_t(inputs.size()) == config_.gradient_accumulation_steps && targets.size() == inputs.size(),
              "Engine::forward_backward: " << inputs.size() << " micro-batches, gradient_accumulation_steps is "
                                           << config_.gradient_accumulation_steps);
  stage_->train();
  parallel::PipelineExecutor::Step s;
  for (size_t m = 0; m < inputs.size(); ++m) {
    s.inputs.push_back(ops::to(inputs[m], device_));
    s.targets.push_back(ops::to(targets[m], device_));
  }
  s.loss = loss;
  s.loss_gradient = loss_seed(DType::f64);  // the stages convert it to their losses' dtype
  s.before_backward = [this](int chunk, bool final) {
    if (!zero_) return;
    if (final) {
      // Taken once, after ZeRO has placed the parameters in its flat buffers.
      if (chunk_params_.empty())
        for (int c = 0; c < stage_->chunks(); ++c) chunk_params_.push_back(stage_->chunk_parameters(c));
      zero_->begin_final_backward(chunk_params_[size_t(chunk)]);
    } else
      zero_->begin_backward(false);
  };
  const nn::RouterLossGradient router(s.loss_gradient);  // Note [Router losses in the backward]
  return pipeline_losses(pipe_->run(s), int64_t(inputs.size()));
}

Tensor Engine::forward_only(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                            const PipelineLoss& loss) {
  TRIAD_CHECK(pipe_, "Engine::forward_only runs a pipeline (pipeline.stages > 1)");
  TRIAD_CHECK(!inputs.empty() && targets.size() == inputs.size(),
              "Engine::forward_only: " << inputs.size() << " inputs, " << targets.size() << " targets");
  NoGradGuard no_grad;
  stage_->eval();
  parallel::PipelineExecutor::Step s;
  for (size_t m = 0; m < inputs.size(); ++m)
    s.inputs.push_back(ops::to(inputs[m], device_)), s.targets.push_back(ops::to(targets[m], device_));
  s.loss = loss;
  const Tensor losses = pipeline_losses(pipe_->forward_only(s), int64_t(inputs.size()));
  stage_->train();
  return losses;
}

Tensor Engine::pipeline_losses(const std::vector<Tensor>& losses, int64_t m) {
  // The last stage's losses, sent to every rank of the pipeline group on the device: the host
  // reads none (Note [Host synchronisation in a step] in train/trainer.cpp).
  Tensor all = Tensor::zeros({m}, DType::f64, device_);
  for (size_t i = 0; i < losses.size(); ++i) ops::copy_(ops::select(all, 0, int64_t(i)), losses[i]);
  pp_->broadcast(all, pp_->size() - 1)->wait();
  return all;
}

void Engine::backward(const Tensor& loss) {
  if (zero_) zero_->begin_backward(micro_ + 1 == config_.gradient_accumulation_steps);
  micro_ = (micro_ + 1) % config_.gradient_accumulation_steps;
  const Tensor seed = loss_seed(loss.dtype());  // the host reads nothing here
  const nn::RouterLossGradient router(seed);  // Note [Router losses in the backward]
  triad::backward(loss, ops::reshape(seed, loss.shape()));
}

void read_outcome(const double* outcome, StepResult& r) {
  r.lr = outcome[0], r.skipped = outcome[1] != 0.0, r.loss_scale = outcome[2];
}

StepResult QueuedStep::read() const {
  StepResult r{step, lr, grad_norm.item(), false, 1.0, comm};
  if (outcome.defined()) read_outcome(outcome.to_vector<double>().data(), r);
  return r;
}

Tensor Engine::loss_seed(DType dtype) const {
  const double steps = double(config_.gradient_accumulation_steps);
  return zero_ ? zero_->loss_seed(steps, dtype) : Tensor::full({}, 1.0 / steps, dtype, device_);
}

zero::ZeroOptimizer::RatesAt Engine::rates() const {
  // The schedule counts the steps taken: as DeepSpeed's engine, which steps its scheduler
  // only after a step that did not overflow, an fp16 step skipped leaves the next one the
  // same rate.
  return [this](int64_t taken) {
    zero::ZeroOptimizer::Rates r{schedule_->lr_at(taken), std::nullopt};
    if (const auto betas = schedule_->betas_at(taken)) r.betas = std::pair(betas->beta1, betas->beta2);
    return r;
  };
}

QueuedStep Engine::queue_step() {
  micro_ = 0;
  if (zero_) {
    zero_->prepare_step(rates());
    zero::ZeroOptimizer::StepNorm norm = zero_->step(config_.gradient_clipping);
    return {++step_, norm.lr, std::move(norm.norm), std::move(norm.outcome), take_comm()};
  }
  const std::vector<Tensor> params = model_->parameters();
  const double norm = config_.gradient_clipping > 0 ? optim::clip_grad_norm(params, config_.gradient_clipping)
                                                    : optim::grad_norm(params);
  const double lr = schedule_->lr_at(step_);
  optimizer_->set_lr(lr);
  optimizer_->step();
  optimizer_->zero_grad();
  ++step_;
  return {step_, lr, Tensor::full({1}, norm, DType::f64), Tensor(), nullptr};
}

nlohmann::json Engine::take_comm() {
  nlohmann::json comm = comm_->to_json();
  comm_->reset();
  if (tp_comm_) {
    comm["tp"] = tp_comm_->to_json();
    tp_comm_->reset();
  }
  if (pp_comm_) {
    comm["pp"] = pp_comm_->to_json();
    pp_comm_->reset();
  }
  if (ep_comm_) {
    comm["ep"] = ep_comm_->to_json();
    ep_comm_->reset();
  }
  return comm;
}

TrainStep Engine::train_step(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets) {
  TRIAD_CHECK(!pipe_, "Engine::train_step: with pipeline parallelism a step runs through forward_backward()");
  TRIAD_CHECK(int64_t(inputs.size()) == config_.gradient_accumulation_steps && targets.size() == inputs.size(),
              "Engine::train_step: " << inputs.size() << " inputs and " << targets.size()
                                     << " targets, gradient_accumulation_steps is "
                                     << config_.gradient_accumulation_steps);
  if (config_.cuda_graph.enabled && plain_steps_ >= config_.cuda_graph.warmup_steps)
    return recorded_step(inputs, targets);
  ++plain_steps_;
  TrainStep s;
  for (size_t m = 0; m < inputs.size(); ++m) {
    const Tensor loss = forward(inputs[m], targets[m]);
    if (!s.losses.defined()) s.losses = Tensor::empty({int64_t(inputs.size())}, loss.dtype(), loss.device());
    ops::copy_(ops::select(s.losses, 0, int64_t(m)), loss);
    backward(loss);
  }
  s.queued = queue_step();
  return s;
}

TrainStep Engine::recorded_step(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets) {
  if (!recording_) {
    TRIAD_CHECK(zero_, "cuda_graph.enabled: a recorded step runs AdamW through ZeRO");
    zero_->read_constants_from_device();
    recording_ = std::make_unique<StepRecording>(device_, inputs, targets);
  }
  recording_->load(inputs, targets);
  const double lr = zero_->prepare_step(rates());
  const StepRecording& r = *recording_;
  const bool ran = recording_->run([&] {
    for (size_t m = 0; m < r.inputs().size(); ++m) {
      const Tensor loss = forward(r.inputs()[m], r.targets()[m]);
      ops::copy_(ops::select(r.losses(), 0, int64_t(m)), loss);
      backward(loss);
    }
    const zero::ZeroOptimizer::StepNorm n = zero_->step(config_.gradient_clipping);
    ops::copy_(r.grad_norm(), n.norm);
    if (n.outcome.defined()) ops::copy_(r.outcome(), n.outcome);
    recorded_comm_ = take_comm();
  });
  if (!ran) zero_->count_replayed_step();
  const Tensor outcome = zero_->loss_scale_on_device() ? r.outcome() : Tensor();
  TrainStep s{.losses = r.losses(),
              .queued = {++step_, lr, r.grad_norm(), outcome, recorded_comm_},
              .activation_peak = ran ? std::nullopt : std::optional<double>(r.activation_peak())};
  return s;
}

double Engine::evaluate(const std::vector<std::pair<Tensor, Tensor>>& batches) {
  TRIAD_CHECK(!batches.empty(), "evaluate: no batches");
  NoGradGuard no_grad;
  if (pipe_) {
    std::vector<Tensor> inputs, targets;
    for (const auto& [x, y] : batches) inputs.push_back(x), targets.push_back(y);
    const std::vector<double> losses = forward_only(inputs, targets, {}).to_vector<double>();
    double sum = 0;
    for (const double l : losses) sum += l;
    return sum / double(batches.size());
  }
  model_->eval();
  double total = 0;
  for (const auto& [x, y] : batches) total += loss_of(x, y).item();
  model_->train();
  return total / double(batches.size());
}

}  // namespace triad::engine
