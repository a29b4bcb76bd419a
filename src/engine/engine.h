// Engine: the model, optimizer, LR schedule and clipping a config describes, and the
// operations of a training step. One optimizer step is
//
//   for each of gradient_accumulation_steps micro-batches: loss = forward(...); backward(loss);
//   step();
//
// backward() scales by 1/gradient_accumulation_steps, so the accumulated gradient is that of
// the mean loss over the global batch; step() clips, sets the scheduled rate (and Adam's
// betas where the schedule sets them), updates and clears the gradients.
//
// The Engine runs on a parallel::ProcessGrid (every group it uses comes from there; a grid
// of one rank when it is given none), whose axes must be the config's: tensor_parallel,
// pipeline.stages and zero_optimization.zero_hpz_partition_size (process_grid() builds
// the grid a config lays out).
//
// With tensor parallelism (config.tensor_parallel > 1) the GPT holds this rank's part of
// every split layer (parallel::TensorParallel), the rank's ZeRO runs over its data-parallel
// group on that part, and clipping and overflow checks span both (Note [ZeRO under tensor
// parallelism]).
// The ranks of a tp group take the same rows of every batch.
//
// AdamW runs through ZeRO (zero/zero_optimizer.h) over the data-parallel ranks (one
// process: a communicator of one rank, where ZeRO is plain AdamW over flat buffers): its
// state is then the same whatever the layout, and checkpoints carry it between layouts.
// With more than one rank each rank feeds forward() its own rows of the global batch. SGD
// runs in one process, in f32, as optim::SGD.
//
// ZeRO's collectives run over the grid's data-parallel group (MPI, which stages device
// tensors through pinned host memory) or, when the config's distributed_backend resolves to
// NCCL, over an NCCL communicator bootstrapped over it on the training GPU (one GPU per rank:
// NCCL does not put two ranks of one communicator on the same GPU). Either way the grid's
// communicators stay the ones for host tensors: the trainer's loss and evaluation sums,
// checkpoint I/O, configuration checks.
//
// model.arch "llama" trains nn::Llama's layer list (nn/llama_layers.h) at every pipeline
// size: at one stage it is the whole list in one process, as for a user's list below.
//
// With pipeline parallelism (config.pipeline.stages > 1) the Engine holds one stage of the
// GPT written as a list of layers (nn/gpt_layers.h), cut as pipeline.partition says;
// forward_backward() runs a whole step's micro-batches through the schedule
// (parallel/pipeline_executor.h) instead of forward() and backward(). ZeRO runs over the
// stage's dp group with its gradients reduced at the step (Note [ZeRO in a pipeline
// stage]); the token table, tied between the first and last stages, is summed over them
// (the grid's tied_group of the stages holding it).
//
// Note [User layer lists]: any model written as an nn::LayerList trains the same way in
// place of the GPT (the LayerList constructor). The config then says everything but the
// model: optimizer, schedule, ZeRO, precision, clipping, batch and pipeline sections; of
// its `model` section only tensor_parallel applies (the GPT's shape, dropout and
// activation_checkpointing do not; pipeline.activation_checkpoint_interval recomputes a
// list's layers). Nothing GPT-specific touches the list: its layers' initial values are
// whatever their builders and the list's `init` give (make them independent of which
// layers a stage holds, e.g. each layer drawing from a generator of its own seed, or the
// stages would start from different models); its tied modules are its TiedSpecs; its
// cut is checked against its own layers (parse_config's LayerList overload checks it
// before any data is read). At pipeline.stages 1 the Engine holds the whole list and
// forward()/backward() run it in one process: the reference a pipelined run must equal.
// Each layer with a name is a ZeRO unit (as each GPT block is), and so is each tied
// module; the rest of a stage is one unit. A list built for tensor parallelism builds its
// layers on a parallel::TensorParallel over the grid's tp group.
//
// Note [Built models]: a model held whole by each rank (no pipeline stages) may also be any
// module the caller builds (the Engine constructor taking a ModelBuilder): RLHF's actor
// loaded from a fine-tuned checkpoint, its reward model and critic (nn/value_model.h). The
// builder is given the Parallelism of the tp group (nn::serial() without tensor
// parallelism) and returns the module with its initial weights; the Engine moves it to the
// device and runs ZeRO over it as over the GPT: each Block and LlamaBlock a unit, the rest one
// root unit gathered around the module's own forward. The caller runs the module's forward
// through model() and calls backward() with its loss; forward() and evaluate() take the
// language model's loss when the module is one (nn::LanguageModel), and refuse otherwise.
//
// The config's `device` says where a rank trains. The model is built on the host (so its
// initial weights are the same on every device) and moved there before the optimizer
// flattens it; from then on parameters, gradients and optimizer state live on the device.
// forward() and evaluate() take batches on the host (or already on the device) and copy
// them over; a loss comes back to the host through Tensor::item().
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "config/config.h"
#include "engine/step_recording.h"
#include "nn/gpt.h"
#include "nn/layer_list.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "parallel/communicator.h"
#include "parallel/counting_communicator.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_grid.h"
#include "zero/zero_optimizer.h"

namespace triad::engine {

struct StepResult {
  int64_t step;             // optimizer steps done, this one included
  double lr;                // the rate this step used
  double grad_norm;         // before clipping
  bool skipped = false;     // fp16: gradients overflowed on some rank, parameters unchanged
  double loss_scale = 1.0;  // the loss scale after this step
  // This rank's communication since the previous step, as CountingCommunicator::to_json
  // ({"bus_bytes", "by_collective"}): ZeRO's over the data-parallel group (and the
  // experts' expert-data-parallel group), and with tensor parallelism under "tp" the same
  // for the tensor-parallel group, pipeline stages under "pp", expert parallelism's
  // all-to-alls under "ep"; null without ZeRO.
  nlohmann::json comm;
};

// A step as step() queued it, its gradient norm not read yet: on a GPU the host has not
// waited for the step's kernels (Note [Host synchronisation in a step] in
// train/trainer.cpp). read() reads the norm, waiting for them.
struct QueuedStep {
  int64_t step;
  double lr;         // NaN when only the device knows it (in outcome)
  Tensor grad_norm;  // (1,) f64 where it was computed (zero::ZeroOptimizer::StepNorm)
  // With loss scaling (fp16): the step's rate, whether it was skipped and the loss scale
  // after it, (kStepOutcome,) f64 where decided (zero::ZeroOptimizer::StepNorm); else undefined.
  Tensor outcome;
  nlohmann::json comm;
  StepResult read() const;
};

// A step's outcome as read to the host (its kStepOutcome values: the rate, whether it was
// skipped, the loss scale after it) into r.
void read_outcome(const double* outcome, StepResult& r);

// One optimizer step as Engine::train_step ran it.
struct TrainStep {
  Tensor losses;  // the micro-batches' losses (m,) on the device, where computed
  QueuedStep queued;
  // A replayed recording (Note [Recorded steps]): the bytes its recording allocated at its
  // peak, which a replay holds without allocating; empty when the step's passes ran.
  std::optional<double> activation_peak;
};

// The seed of rank `rank`'s dropout generator for a run starting at `step`: distinct per
// rank, and a pure function of the config's seed, so restarts are reproducible. The
// default generator takes the data-parallel rank (the same stream on every rank of a tp
// group); the tensor-parallel one (tensor/random.h) tensor_parallel_seed's.
uint64_t dropout_seed(uint64_t seed, int rank, int64_t step);
uint64_t tensor_parallel_seed(uint64_t seed, int dp_rank, int tp_rank, int64_t step);

// The device a rank trains on for the config's `device` value: "cpu"; "cuda:N"; or "cuda",
// which is the rank's own GPU on its node (rank_on_node() modulo the visible devices, as
// the NCCL communicator picks). Throws Error naming the key when the build has no CUDA
// backend, when no GPU is visible, or when cuda:N is not.
Device training_device(const std::string& device);

// What ZeRO's collectives run over (the config's distributed_backend, named after
// Megatron's --distributed-backend).
enum class DistributedBackend {
  mpi,   // the communicator given to the Engine (MPI under mpirun; one process: of one rank)
  nccl,  // an NCCL communicator over the given one's ranks, on the training GPU
};

// Resolves distributed_backend ("auto", "mpi" or "nccl") for a rank training on `device`
// among `ranks` data-parallel ranks, `shared` saying which of them train on one GPU
// together (shared_gpu; "" when none do): "auto" is nccl when the device is a GPU, this
// build has NCCL, ranks > 1 and no GPU is shared, else mpi. Throws Error naming the key
// for any other value, and for "nccl" with a cpu device, in a build without NCCL, or on a
// shared GPU (NCCL runs one rank per GPU). Ranks running one config resolve it alike.
DistributedBackend resolve_distributed_backend(const std::string& backend, Device device, int ranks,
                                               const std::string& shared = "");

// Two ranks of dp that train on the same GPU of one node, as "ranks 0 and 1 both train on
// cuda:0 of one node", or "" when every rank has a GPU of its own or the device is not a
// GPU (collective over dp when the device is a GPU; every rank gets the same answer).
std::string shared_gpu(parallel::Communicator* dp, Device device);

// Builds a model on a tensor-parallel layout (Note [Built models]).
using ModelBuilder = std::function<nn::ModulePtr(std::shared_ptr<const nn::Parallelism>)>;

using GridPtr = std::shared_ptr<const parallel::ProcessGrid>;

// The grid `config` lays out over `world` (null: this process alone): tp =
// model.tensor_parallel, dp = data_parallel, pp = pipeline.stages, hpz =
// zero_optimization.zero_hpz_partition_size, nodes of cluster.ranks_per_node ranks when the
// config gives it (else MPI's), or of the whole job when that is at least the job's size.
// Collective over world. Throws Error naming the keys when tp x pp x dp is not the job's
// size, or when cluster.ranks_per_node is smaller and does not divide it.
GridPtr process_grid(const TrainConfig& config, parallel::CommunicatorPtr world);

class Engine {
 public:
  // grid: the layout this rank trains in (null: one process); its tp, pp and hpz sizes must
  // be config.tensor_parallel, pipeline.stages and zero_optimization.zero_hpz_partition_size.
  explicit Engine(const TrainConfig& config, GridPtr grid = nullptr);
  // The user's model as a list of layers instead of the GPT (Note [User layer lists]), on
  // the grid as above; this rank holds its pipeline stage of the list (all of it at
  // pipeline.stages 1). For example, with `layers` a LayerList:
  //
  //   TrainConfig c = parse_config(json, world->size(), layers);  // world: parallel::init's
  //   Engine engine(c, layers, process_grid(c, world));
  //   Tensor losses = engine.forward_backward(inputs, targets);  // or, at one stage,
  //   engine.step();                                              // forward() and backward()
  //
  // (examples/pipeline_mlp.cpp is a whole program.)
  Engine(const TrainConfig& config, nn::LayerList layers, GridPtr grid = nullptr);

  // The caller's model (Note [Built models]), on the grid as above; no pipeline stages.
  Engine(const TrainConfig& config, const ModelBuilder& build, GridPtr grid = nullptr);

  // Mean loss of one micro-batch: the GPT's cross-entropy of inputs and targets (B, T) of
  // i64, or a layer list's loss of its first layer's input and the targets; on the host or
  // on device(). The loss is a one-element tensor on device(). Without pipeline parallelism.
  Tensor forward(const Tensor& inputs, const Tensor& targets);
  void backward(const Tensor& loss);
  // Pipeline parallelism: forward and backward of one step's micro-batches (inputs and
  // targets as forward() takes them, gradient_accumulation_steps of each) as the schedule
  // orders them. Returns their losses (m,) on every rank of the pipeline group (sent from
  // the last stage). Collective over the pipeline group. The loss is the list's, fused with
  // its last layer where the list allows (Note [Fused head loss] in nn/layer_list.h).
  Tensor forward_backward(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets);
  // Note [Pipeline losses]: the same with the caller's loss in place of the list's, run on
  // the last stage with each micro-batch's output and targets (RLHF's losses: the targets
  // may be anything the loss reads, such as the micro-batch's index into the caller's data).
  // An empty loss is the list's own.
  using PipelineLoss = std::function<Tensor(const Tensor& output, const Tensor& targets)>;
  Tensor forward_backward(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                          const PipelineLoss& loss);
  // The forwards alone through the pipeline (any number of micro-batches, no gradients, eval
  // mode): their losses under `loss` (empty: the list's own), (m,) on every rank of the
  // pipeline group.
  Tensor forward_only(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                      const PipelineLoss& loss);
  // One optimizer step of micro-batches inputs[m], targets[m] (gradient_accumulation_steps
  // of each, as forward() takes them): forward() and backward() of each, then queue_step().
  // With cuda_graph.enabled the steps after its warmup_steps are one recording replayed
  // (Note [Recorded steps] in engine/step_recording.h): then every step returns the same
  // losses and norm tensors, which the next step overwrites. Without pipeline parallelism.
  TrainStep train_step(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets);
  StepResult step() { return queue_step().read(); }
  // The same without reading the gradient norm.
  QueuedStep queue_step();
  // Mean loss over (inputs, targets) pairs without recording gradients (eval mode); with
  // pipeline parallelism collective over the pipeline group, the same on each of its ranks.
  double evaluate(const std::vector<std::pair<Tensor, Tensor>>& batches);

  // The model this rank holds: the GPT, or with pipeline parallelism, a Llama or a layer
  // list its stage (nn::PipelineStage).
  nn::Module& model() { return *model_; }
  const nn::ModulePtr& model_ptr() const { return model_; }
  bool pipelined() const { return pipe_ != nullptr; }
  const parallel::PipelineExecutor* pipeline() const { return pipe_.get(); }
  // The grid's groups as the Engine talks over them: tp over NCCL where its ranks have a GPU
  // each, tp and pp counted (StepResult::comm).
  const parallel::CommunicatorPtr& dp() const { return dp_; }
  const parallel::CommunicatorPtr& tp() const { return tp_; }
  const parallel::CommunicatorPtr& pp() const { return pp_; }
  // The expert-parallel group the MoE layers spread their experts over (one rank: none).
  const parallel::CommunicatorPtr& ep() const { return ep_; }
  // A tied parameter (nn/layer_list.h) this rank holds as a copy of the first stage's,
  // which checkpoints store once, from that stage.
  bool is_tied_copy(const std::string& name) const { return tied_copies_.count(name) > 0; }
  Device device() const { return device_; }  // where the model and optimizer state live
  // Makes every parameter readable in full (ZeRO stage 3 gathers them: collective, every
  // rank calls it) and partitions them again afterwards; no-ops otherwise.
  void gather_parameters() {
    if (zero_) zero_->gather_all();
  }
  void release_parameters() {
    if (zero_) zero_->release_all();
  }
  // Applies the update ZeRO left running (Note [Delayed parameter update] in
  // zero/zero_optimizer.h; collective, every rank calls it); a no-op when none is pending.
  void apply_pending_update() {
    if (zero_) zero_->apply_pending_update();
  }
  // Model-state bytes resident on this rank (ZeRO's accounting; empty without ZeRO).
  zero::ResidentBytes memory() const { return zero_ ? zero_->memory() : zero::ResidentBytes{}; }
  const TrainConfig& config() const { return config_; }
  int64_t global_step() const { return step_; }
  // Resuming: the step the counters continue from (the schedule continues from the steps
  // the optimizer took, which the checkpoint restores with it).
  void set_global_step(int64_t step) { step_ = step; }
  // The ZeRO optimizer (null with SGD), for checkpoints.
  zero::ZeroOptimizer* zero() { return zero_.get(); }
  // The communicator ZeRO runs over, counted ("counting(mpi)", "counting(nccl)"; null with
  // SGD). An NCCL one takes tensors on device() only.
  const parallel::CountingCommunicator* zero_communicator() const { return comm_.get(); }
  // The schedule's rate (and betas) after `step` optimizer steps taken: an fp16 step skipped
  // for overflow is not taken (DeepSpeed does not step its scheduler after one).
  double lr_at(int64_t step) const { return schedule_->lr_at(step); }
  std::optional<optim::AdamBetas> betas_at(int64_t step) const { return schedule_->betas_at(step); }

 private:
  // The public constructors: the GPT without `layers` or `build`, else the user's list or
  // the built model. The body runs the steps below in order.
  Engine(const TrainConfig& config, std::optional<nn::LayerList> layers, const ModelBuilder& build, GridPtr grid);

  // The grid's groups, checked against the config; tp over NCCL where it can, tp and pp
  // counted; the backend ZeRO will run over (zero_backend_).
  void join_groups();
  // The GPT, the user's list (this rank's stage of it) or the built model, on the host.
  void build_model(std::optional<nn::LayerList> user_layers, const ModelBuilder& build);
  void build_pipeline_stage();
  // The executor of the schedule (pipeline.stages > 1).
  void start_pipeline();
  // The dropout generators' seeds (dropout_seed, tensor_parallel_seed) at step 0.
  void seed_generators();
  // AdamW through ZeRO, or SGD in one process.
  // The config's zero_optimization section with what precision, the gradient keys and the
  // pipeline decide.
  zero::ZeroConfig zero_config() const;
  void make_optimizer();
  // ZeRO's units beyond the default (modules of type Block): the stage's named layers and
  // tied modules.
  zero::WrapPolicy wrap_policy(const std::vector<std::string>& tied_modules) const;
  // What ZeRO needs to know of the stage: the tied modules' groups.
  zero::PipelinePlacement pipeline_placement(std::vector<std::string>& tied_modules);
  // ZeRO++'s groups (the grid's, counted with comm_; none when ZeRO++ is off), given the
  // node of each dp rank.
  zero::ZeroPlusPlusGroups zeropp_groups(const std::vector<int>& nodes);

  Tensor loss_of(const Tensor& inputs, const Tensor& targets);  // one micro-batch, one process
  // The communication counted since the last call (StepResult::comm), the counters reset.
  nlohmann::json take_comm();
  // train_step through recording_ (Note [Recorded steps]).
  TrainStep recorded_step(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets);
  // The schedule's rate and betas after a number of steps taken, for ZeRO's step.
  zero::ZeroOptimizer::RatesAt rates() const;
  // The backward's seed of a micro-batch's loss, () in `dtype`: the loss scale over the
  // accumulation steps, made where the scale is (Note [Loss scale on the device]).
  Tensor loss_seed(DType dtype) const;
  Tensor pipeline_losses(const std::vector<Tensor>& losses, int64_t micro_batches);

  TrainConfig config_;
  Device device_;
  GridPtr grid_;
  parallel::CommunicatorPtr dp_, tp_, pp_;
  std::shared_ptr<parallel::CountingCommunicator> tp_comm_;  // tp_, counted (tp > 1)
  std::shared_ptr<parallel::CountingCommunicator> pp_comm_;  // pp_, counted (pp > 1)
  parallel::CommunicatorPtr ep_;                             // the experts' all-to-alls,
  std::shared_ptr<parallel::CountingCommunicator> ep_comm_;  // counted (ep > 1)
  DistributedBackend zero_backend_ = DistributedBackend::mpi;
  nn::ModulePtr model_;
  std::shared_ptr<nn::LanguageModel> lm_;  // the GPT or a built language model, held whole
  nn::LayerList layers_;          // else the model's layers (the GPT's or the user's),
  std::vector<int> bounds_;       // virtual stage s holds layers [bounds_[s], bounds_[s + 1])
  std::shared_ptr<nn::PipelineStage> stage_;  // the ones this rank holds,
  std::unique_ptr<parallel::PipelineExecutor> pipe_;  // and the schedule's runner (pp > 1)
  std::vector<std::vector<Tensor>> chunk_params_;     // per chunk: PipelineStage::chunk_parameters
  std::set<std::string> tied_copies_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LRSchedule> schedule_;
  std::unique_ptr<zero::ZeroOptimizer> zero_;
  std::shared_ptr<parallel::CountingCommunicator> comm_;  // ZeRO's traffic, counted
  int64_t step_ = 0;
  int64_t micro_ = 0;  // micro-batches backpropagated since the last step
  int64_t plain_steps_ = 0;                   // steps train_step ran before recording (cuda_graph.warmup_steps)
  std::unique_ptr<StepRecording> recording_;  // cuda_graph.enabled, after the warmup
  nlohmann::json recorded_comm_;              // what the recorded step communicated
};

}  // namespace triad::engine
