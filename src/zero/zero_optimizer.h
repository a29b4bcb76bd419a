// ZeRO data parallelism (stages 0–3) over flat parameter groups, with AdamW.
//
// Every data-parallel rank runs the same model on its own slice of the global batch; the
// gradient of the global mean loss is the mean of the ranks' gradients. The stages differ
// in what each rank keeps and when gradients move (Ψ parameters, n ranks):
//   stage 0: full gradients all-reduced per group as the backward completes each group
//            (last micro-batch of an accumulation only); every rank updates everything.
//   stage 1: optimizer state sharded: full gradients accumulate locally and are
//            reduce-scattered at the step; each rank updates its shard, then all-gather.
//   stage 2: gradients sharded too: each group's gradient is reduce-scattered as soon as
//            the backward has completed it, added to the rank's shard, and freed.
//   stage 3: parameters sharded too (Note [Stage 3 gathering]).
// Each group's reduction and gather is issued in buckets of at most reduce_bucket_size and
// allgather_bucket_size elements (zero/buckets.h).
// Communication per step is 2Ψ(n−1)/n elements of bus traffic in stages 0–2, 3Ψ(n−1)/n in
// stage 3 (parameters gathered once for the forward and once for the backward).
//
// Note [Stage 3 gathering]: each unit's parameters are all-gathered by a forward pre-hook
// on its module (the next unit's gather is started at the same time: prefetch) and
// released by its post-hook (with stage3_prefetch_bucket_size, further units' gathers
// start early too). A hook on the gradient of the unit's output gathers them
// again just before the unit's backward (prefetching the unit the backward reaches next),
// and each group is released once the backward has completed its gradients. Backward
// closures hold parameters by handle (Note [Saved inputs]), so they read the gathered
// values. Units must run in the order make_units returns them (the root unit, the model
// itself, first); activation checkpointing, which re-runs forwards inside the backward, is
// not supported with stage 3.
//
// Every buffer (flat parameters and gradients) lives on the device the model's parameters
// are on when the optimizer is made, and so do the master weights and moments, which the
// shard store keeps (zero/shard_store.h; with offload_optimizer.device "nvme" they live in
// files and come in by sub-groups: Note [Offloaded optimizer state] in
// zero/nvme_shard_store.h; at stages 2 and 3 the rank's reduced gradients go there too, Note
// [Offloaded gradients]; with "cpu" on a GPU they live in host memory, where Adam runs:
// Note [Host optimizer step] in zero/host_shard_store.h; with ratio below 1 only the last
// sub-groups do: Note [Partial offload] in zero/partial_offload_store.h); the host reads the
// gradient norm only where the update runs on the host (with the update on the device,
// fp16's overflow test stays there too: Note [Loss scale on the device] in
// zero/device_loss_scale.h). Everything the communicator is handed is on that device, the partial norms and overflow
// flags reduced over ranks included: an NCCL communicator takes its GPU's tensors only.
//
// Gradients of parameters are views of their group's flat gradient (Note [Flat
// parameters]); the clipping norm is the norm of the full averaged gradient (optim/clip.h:
// shards' squares summed in double and all-reduced). Loss scaling is optim/loss_scaler.h's rule,
// on the device where the update is (zero/device_loss_scale.h).
//
// Note [ZeRO under tensor parallelism]: with a tensor-parallel group tp, each tp rank runs
// its own ZeroOptimizer over its dp group, on the parts of the parameters it holds (their
// flat groups have the same layout on every tp rank, the local shapes being equal). At the
// step, gradients of parameters marked partial_grad (sequence parallelism) are summed over
// tp, and the norm counts every element of the global model once: the split parameters'
// squares on every tp rank, the replicated ones' on tp rank 0 only, summed over tp on the
// device. The other tp ranks' replicated gradients are the same values as rank 0's (the
// partial ones summed over tp, the others computed from the same replicated inputs), so an
// inf/NaN in them is in rank 0's sum too, and every rank's norm is non-finite (one verdict).
//
// Note [Delayed parameter update] (the ZeRO-Offload paper's DPU, arXiv 2101.06840;
// zero_optimization.delayed_update): step() of step i >= warmup_steps (counting the steps
// taken, counters().steps) reduces, unscales, measures and clips the gradients as always,
// then hands the update to a thread and returns: step i+1's forward and backward run
// while Adam (and the NVMe swap of its state) works, on the weights before update i.
// step() of step i+1 first waits for update i and applies it, so the gradient of step
// i+1 is taken at the weights before update i, one step stale, and the updates apply in
// order; the steps before warmup_steps are ordinary. The thread writes the new
// parameters into a copy (the rank's shard, or the whole group at stage 0) and its own
// copy of the gradients: what the forward reads never changes under it; the all-gather
// of the new parameters (stages 1-3) is the training thread's, when the update applies.
// A pending update is applied (apply_pending_update) before anything reads the state
// whole: a checkpoint's state_view, gather_all, a skipped step (fp16 overflow: the step
// applies the pending update and starts none). Such a point ends the staleness once: the
// next step's gradient is taken at the updated weights, in a run that goes on as in one
// resumed from a checkpoint written there, which therefore follow the same trajectory.
// Costs: a copy of the rank's gradient and parameter shards. On the CPU training device, or
// on a GPU with the update on the host (Note [Host optimizer step]: the training thread
// stages the gradients' copies before the thread starts, so that they follow the work queued
// so far, and the thread queues the new parameters' copies into the update's own copy);
// not with offloaded parameters (nvme: ZeroConfig::validate; cpu on a GPU: the constructor)
// or in pipeline stages (ZeroConfig::validate).
#pragma once

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "zero/device_loss_scale.h"
#include "zero/expert_placement.h"
#include "zero/flat_group.h"
#include "zero/param_swap.h"
#include "zero/quantized_collectives.h"
#include "zero/shard_store.h"
#include "zero/units.h"
#include "zero/zero_config.h"

namespace triad::zero {

// Note [ZeRO++] (arXiv 2306.10209): three changes to stage 3's traffic, each on its own key.
//   qwZ  each forward all-gather moves every rank's shard as int8 blocks and their f32
//        scales (zero/quantized_collectives.h), dequantized into the unit's buffer: the
//        forward reads weights within half a quantization step of the exact ones, the same
//        on every rank. The backward's gather, the master weights and the optimizer are
//        exact.
//   hpZ  after a unit's forward gather each rank keeps slice h_r of the gathered buffer
//        (its secondary shard, 1/h of it, h = hpz_partition_size consecutive dp ranks: a
//        node when h is the ranks per node), and the unit's backward gathers over those h
//        ranks only. Secondary shards are made by each training forward from the values it
//        gathered and dropped once the backward has used them, and at every step: they are
//        never older than the parameters (after a step or a checkpoint load the next forward
//        makes them anew). `memory()` counts them in param_bytes.
//   qgZ  each gradient reduction is a reduce-scatter in two hops of int4 blocks: an
//        all-to-all inside the node (each rank sends the chunk destined for each local
//        rank's column of nodes), dequantized and summed in f32, requantized, then an
//        all-to-all across nodes among the ranks at the same local position, dequantized
//        and summed in f32: each rank ends with the sum of its shard. Any node count works;
//        nodes must hold equally many ranks of the dp group.
// Block sizes. A block's elements are rounded to multiples of its largest |value| / 127
// (int8) or / 7 (int4). qwZ's int8 over DeepSpeed's 4096-element blocks costs nothing
// measurable: make demo's model, 4 ranks on 2 nodes, 1000 steps, ends at validation loss
// 4.6018 against ZeRO-3's 4.6000. int4 gradients over 4096-element blocks end at 4.7561
// (+3.4%): a block's few large gradients set a step that rounds most of the others to zero,
// every step, the same way. Over 1024-element blocks qgZ ends at 4.6494 (+1.1%), over 256 at
// 4.6019, for 8/256 more bytes in its second hop; gradient_quantization_block defaults to
// 256.
// Bus bytes between nodes per step, Ψ elements of 16-bit weights and gradients, n ranks on
// N nodes of L, b the block (ZeRO-3's 3·2Ψ(n−1)/n): the forward gather moves Ψ(1 + 4/b)
// instead of 2Ψ per (n−1)/n; hpZ's backward gathers stay inside nodes; qgZ's second hop
// moves (Ψ/L)(1/2 + 4/b)(N−1)/N.
struct ZeroPlusPlusGroups {
  parallel::CommunicatorPtr hpz;    // the rank's hpZ group (hpz_partition_size consecutive dp ranks)
  parallel::CommunicatorPtr intra;  // the dp ranks on this rank's node, by dp rank
  parallel::CommunicatorPtr inter;  // one dp rank per node at this rank's position on its node, by node
};

// Note [ZeRO in a pipeline stage]: each pipeline stage runs its own ZeroOptimizer over its
// dp group on the parameters it holds. A schedule interleaves the forwards and backwards of
// many micro-batches (and ZB-H1 completes weight gradients long after the rest), so no
// backward is "the last one" for every group: gradients accumulate over the step's
// micro-batches (stage 2 and 3 included; defer_reduction). The executor knows when a
// chunk's last backward of the step begins (the schedule is a list): the groups of that
// chunk's parameters are reduced as that backward completes them, overlapping the
// backwards of the stage's other chunks and the pipeline's drain (begin_final_backward).
// The rest, and every group under ZB-H1 (whose weight gradients of several micro-batches
// arrive after the last input-gradient pass), are reduced at step().
// The norm and the overflow verdict sum over pp as well. A tied parameter (nn/layer_list.h,
// Note [Tied layers]) forms groups of its own on every stage holding it, laid out alike,
// whose reduced gradients are summed over the tie's group before the update: the copies
// take identical steps, and the norm counts them once (on the tie group's rank 0).
struct PipelinePlacement {
  parallel::CommunicatorPtr pp;  // the stages (null or one rank: no pipeline)
  struct Tie {
    std::vector<std::string> params;  // the tied parameters, by name
    parallel::CommunicatorPtr group;  // the ranks holding them: same dp and tp coordinates
  };
  std::vector<Tie> ties;
};

// Bytes resident on this rank for model states (Note: fp32 training keeps no separate
// master copy; the parameters are their own master weights), on the training device; with
// offload, host_bytes in host memory apart from the device's (a GPU's swap buffers) and
// nvme_bytes in swap files. Offloaded parameters count on the device the most their buffers
// hold at once (buffer_count of the largest shards), and their shards where the swap keeps
// them: in its file, or (offload_param cpu) in host_bytes.
struct ResidentBytes {
  int64_t param_bytes = 0, grad_bytes = 0, optim_bytes = 0, buffer_bytes = 0;
  int64_t host_bytes = 0, nvme_bytes = 0;
};

// It installs hooks on the model's parameters and (stage 3) modules that refer to it: the
// model must not run a forward or backward after its ZeroOptimizer is gone.
class ZeroOptimizer {
 public:
  // tp: the tensor-parallel group the model is split over (null or one rank: none);
  // pipeline: the stages the model is cut into (Note [ZeRO in a pipeline stage]). Tied
  // parameters must form units of their own (policy.module_names).
  // zeropp: the groups ZeRO++'s hpZ (hpz) and qgZ (intra, inter) run over, when enabled.
  // experts: the group the MoE experts are held by under expert parallelism (Note [ZeRO with
  // experts] in zero/expert_placement.h).
  ZeroOptimizer(const nn::ModulePtr& model, const ZeroConfig& config, const optim::AdamWOptions& adamw,
                double weight_decay, parallel::CommunicatorPtr dp, const WrapPolicy& policy = {},
                parallel::CommunicatorPtr tp = nullptr, PipelinePlacement pipeline = {}, ZeroPlusPlusGroups zeropp = {},
                ExpertPlacement experts = {});

  // Call before each micro-batch's backward; `last` marks the last micro-batch of the
  // accumulation (stage 0 reduces only then).
  void begin_backward(bool last);
  // Pipeline stages (defer_reduction): call instead of begin_backward before the step's
  // last backward that contributes to `params` (Note [ZeRO in a pipeline stage]). A group
  // all of whose parameters are among them is reduced as soon as that backward completes
  // it, behind the stage's remaining backwards; the others wait for step().
  void begin_final_backward(const std::vector<Tensor>& params);
  // What step() returns: the global gradient norm before clipping, kept where it was
  // computed. It is on the device, the square root of the sum the clipping read there, and
  // the host has not waited for it (Note [Host synchronisation in a step] in
  // train/trainer.cpp), unless the host needed the norm before the update (the loss scale's
  // overflow test with an update on the host, gradients kept by the store): then it is on
  // the CPU. norm.item() reads it.
  struct StepNorm {
    Tensor norm;  // (1,) f64; not finite for a skipped step
    // The step's learning rate when the host knows it; NaN when it is in `outcome`.
    double lr = 0;
    // With loss scaling: (kStepOutcome,) f64, the step's learning rate, whether it was
    // skipped (1: the gradients overflowed on some rank; nothing was updated) and the loss
    // scale after it (tensor/loss_scale_math.h), on the device with the loss scale on it
    // (Note [Loss scale on the device]), else on the CPU. Undefined without loss scaling.
    Tensor outcome;
    bool skipped() const;  // reads outcome
  };
  // The schedule's learning rate and, when it sets them, Adam's betas, after `taken` steps.
  struct Rates {
    double lr;
    std::optional<std::pair<double, double>> betas;
  };
  using RatesAt = std::function<Rates(int64_t taken)>;
  // Before step(): the rates of the step, the schedule's at the steps taken so far. Adam's
  // constants read from memory (a recorded step, Note [Recorded steps]; the loss scale on
  // the device, whose steps taken the host does not know) are queued on the device here,
  // outside a recording; the host does not wait. Returns the step's learning rate, NaN when
  // only the device knows it (StepNorm::outcome).
  double prepare_step(const RatesAt& rates);
  // Averages and reduces what the backward left, unscales, clips to max_norm (0: off),
  // updates with the prepared rates, gathers the parameters, clears the gradients.
  StepNorm step(double max_norm);
  // Both, at a constant rate with the betas set.
  StepNorm step(double lr, double max_norm);
  // Waits for the update of the last step, if it is pending (Note [Delayed parameter
  // update]), and applies it; collective over dp at stages 1-3 (the new parameters are
  // gathered), so every rank calls it at the same point. A no-op when none is pending.
  void apply_pending_update();
  bool update_pending() const { return delayed_.running.valid(); }
  // Adam's betas from the next step on (a schedule's: DeepSpeed's OneCycle cycles beta1).
  void set_betas(double beta1, double beta2);
  // Note [Recorded steps] (engine/step_recording.h): from now on step()'s update reads
  // Adam's constants from a table on the training device, a row per group (Note
  // [Adam's constants in memory]), which prepare_step() fills before each step, so that a
  // step recorded once replays with the rate, betas and bias corrections of the step it
  // runs as. Only where the whole update runs on the device in one call: the state in the
  // device's memory (no offload), no delayed update (each needs the host inside the step);
  // else an Error naming what.
  void read_constants_from_device();
  // A replay of a recorded step ran on the device (its host side ran once, when it was
  // recorded): counts the step it took.
  void count_replayed_step();
  // The factor the loss's gradient must be multiplied by before the backward (with the loss
  // scale on the device, the host reads it there and waits).
  double loss_scale() const;
  // The backward's seed of a loss: loss_scale() / divisor, () in `dtype` (the loss's) on the
  // training device, made there without the host's reading the scale.
  Tensor loss_seed(double divisor, DType dtype) const;
  // Whether the loss scale lives on the device (Note [Loss scale on the device]).
  bool loss_scale_on_device() const { return device_scale_ != nullptr; }

  // Waits for a pending update without applying it (its errors are lost with it).
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  ResidentBytes memory() const;
  // The parameters' swap (offload_param nvme, or cpu on a GPU; null without it).
  const ParamSwap* param_swap() const { return param_swap_.get(); }
  // The flat groups' padded sizes and whether each is partitioned (stage 3), in order: what
  // a closed form of the step's traffic sums over.
  std::vector<std::pair<int64_t, bool>> group_sizes() const;

  // Checkpoints see the optimizer's state as named, flattened tensors (checkpoint/checkpoint.h):
  // per parameter its values (storage dtype), f32 master weights (the values themselves in
  // f32 training) and Adam's two moments. A Slice is elements [first, first + numel) of
  // parameter `name`, as a 1-d view of a StateView's storage.
  enum class State { param, master, exp_avg, exp_avg_sq };
  struct Slice {
    std::string name;
    Shape shape;  // the parameter's
    int64_t first;
    Tensor values;
  };
  // One state of every group (or of a batch of groups, Note [Streamed checkpoints]), in
  // memory while the view lives: the optimizer's own tensors, or, where the state is kept in
  // files (offload), copies read in (of every group: a third of the optimizer's state in
  // host memory; of a batch: the batch's). Writes through the slices reach the stored state
  // once commit() is called. Take no view across a step.
  class StateView {
   public:
    // The elements of this rank's shard: every element of every parameter belongs to
    // exactly one rank's slices (what a rank saves).
    std::vector<Slice> owned_slices() const { return slices(true); }
    // Every element of the state this rank keeps (what a rank loads): stage 0 keeps all,
    // stages 1 and 2 keep all parameters but only the shard of the rest, stage 3 the shard.
    std::vector<Slice> resident_slices() const { return slices(false); }
    // Stores what was written through the slices (a no-op where they are the state itself).
    void commit();
    // Offloaded parameters (zero/param_swap.h): the shards the view brought in leave memory.
    ~StateView();
    StateView(const StateView&) = delete;
    StateView& operator=(const StateView&) = delete;
    // The moved-from view holds nothing (commits and drops nothing).
    StateView(StateView&& other) noexcept;

   private:
    friend class ZeroOptimizer;
    StateView(ZeroOptimizer& zero, State state, size_t first, size_t end);
    std::vector<Slice> slices(bool owned) const;

    ZeroOptimizer* zero_;
    State state_;
    size_t first_group_;  // the groups it views: [first_group_, first_group_ + buffers_.size())
    std::vector<std::pair<Tensor, int64_t>> buffers_;  // per group: the storage and the first flat element it covers
  };
  // Every group's state.
  StateView state_view(State state);
  // Note [Streamed checkpoints]: a checkpoint goes through the state batch by batch, each a
  // run of consecutive groups viewed on its own (state_view(state, batch)), so that with
  // offload (optimizer state or parameters in swap files, or parameters in host memory: Note
  // [Offloaded parameters] in zero/param_swap.h) what a view reads in is bounded by
  // a batch, not the model: a batch holds one group, or several whose elements (this rank's
  // part of the state) add up to at most the largest group's. Without offload there is one
  // batch of every group: a view is then the optimizer's own tensors and reads nothing in.
  // Every rank has its own batches (the groups of its pipeline stage); each names its
  // groups' parameters, which the checkpoint agrees on over the ranks.
  struct ViewBatch {
    size_t first = 0, end = 0;        // the groups [first, end)
    std::vector<std::string> params;  // their parameters, in the groups' order
  };
  std::vector<ViewBatch> view_batches() const;
  StateView state_view(State state, const ViewBatch& batch);
  // The scalar state: steps taken (bias correction) and the loss scale's (optim/loss_scaler.h).
  struct Counters {
    int64_t steps = 0;
    optim::LossScaler::State loss_scale;
  };
  Counters counters() const;  // with the loss scale on the device, read there (the host waits)
  void set_counters(const Counters& c);
  // Stage 3: gather every parameter (collective) so the whole model can be read, e.g. to
  // save it or to generate (Note [Hybrid engine] in engine/hybrid_engine.h); until
  // release_all() partitions it again (on this rank alone: no collective) the units' forward
  // hooks neither gather nor release, so forwards in between make no collective. No-ops in
  // stages 0–2.
  void gather_all();
  void release_all();

 private:
  struct Group {
    std::unique_ptr<FlatGroup> flat;
    Tensor shard_grad;           // stage 1, 2: this rank's summed gradient shard
    // Its master weights and moments in store_: elements [first, first + count) of its
    // state (stage 0: the full group; else the shard) in store_'s entry.
    struct SubGroup {
      size_t entry;
      int64_t first, count;
      double grad_squares = 0;  // its gradient's, unscaled, when the store keeps it (Note [Offloaded gradients])
    };
    std::vector<SubGroup> subgroups;
    int ready = 0;               // parameters whose gradient this backward has completed
    bool launched = false;       // its reduction for this backward (pipelines: this step) has started
    bool final = false;          // pipelines: no more gradient comes this step (begin_final_backward)
    parallel::WorkPtr gather;    // stage 3: the all-gather of its parameters, in flight
    bool partitioned = false;    // stage 3 and above the persistence threshold
    // Offloaded, its shard updated by the host update where the parameter swap keeps it in
    // host memory, or (a file, mixed precision) in host_params, written to the file from there
    // (Note [Parameters updated in place] in zero/host_shard_store.h): the update never
    // brings the shard onto the device.
    bool in_place = false;
    Tensor host_params;
    std::vector<nn::TensorSplit> splits;  // of flat->params()
    parallel::Communicator* tie = nullptr;  // its parameters are tied over this group
    parallel::Communicator* comm = nullptr;  // reduced and sharded over: dp, or edp (Note [ZeRO with experts])
  };
  struct Pending {
    parallel::WorkPtr work;
    Group* group;
    Tensor result;  // a stage-2 gradient's reduce-scatter output, added to the shard when done
  };

  // The flat groups unit u forms, in the order they are built: one per (weight decay,
  // expert, stage-3 persistence) class of its parameters.
  struct GroupSpec {
    std::vector<std::pair<std::string, Tensor>> params;
    bool decay = false, expert = false, persistent = false;
  };
  std::vector<GroupSpec> group_specs(const Unit& u, const std::map<std::string, nn::TensorSplit>& splits) const;
  // The elements of the optimizer's state the rank will keep (its shards; stage 0 the
  // groups), before the groups are built (Note [Partial offload]).
  int64_t state_elements(const std::map<std::string, nn::TensorSplit>& splits) const;
  // The storage holding `state` for g and the first flat element it covers (StateView).
  std::pair<Tensor, int64_t> buffer(const Group& g, State state);
  void add_state(Group& g, const Tensor& master);
  // Offloaded parameters: checks unit u's shards against the buffers and moves them to
  // param_swap_ (Note [Offloaded parameters] in zero/param_swap.h).
  void offload_params(size_t u);
  // One step's update: its rate, Adam's options and step count, the gradients it reads
  // and, per group, where the new parameters go (empty: the parameters themselves).
  struct Update {
    double lr = 0;
    optim::AdamWOptions adamw;
    int64_t step = 0;
    std::vector<Tensor> grads, params;
    // Gradients kept by the store (Note [Offloaded gradients]): the factors step() applies
    // to gradients in memory, applied to each sub-group's as it is updated.
    double unscale = 1.0, clip = 1.0;
  };
  void update(const Update& u);  // Adam over every sub-group
  // Note [Host optimizer step]: a store that updates on the host starts copying every
  // sub-group's gradient there (an offloaded parameter shard's once it is in memory: update()).
  void stage_update(const Update& u);
  // The parameters a sub-group's update writes, and (in memory) the gradient it reads.
  Tensor update_params(const Update& u, size_t group, const Group::SubGroup& sub);
  Tensor update_grad(const Update& u, size_t group, const Group::SubGroup& sub) const;
  // Stages 1-3: all-gathers the groups that are not partitioned from the rank's shards.
  void gather_updated();
  // Note [Delayed parameter update]: the update running on its thread, and its copies.
  struct Delayed {
    std::future<void> running;
    Update update;
  };
  void on_grad_ready(Group& g);
  void install_stage3_hooks();
  // What a gather is for: a forward (qwZ quantizes it, hpZ keeps secondary shards of it), a
  // backward (hpZ gathers from the secondary shards), or the whole model (exact).
  enum class Use { forward, backward, whole };
  void gather_unit(size_t u, Use use);    // blocks until the unit's parameters are gathered
  // Starts gathering (no-op when gathered or out of range). Offloaded parameters: a shard
  // not in memory yet is read on the I/O thread, and its gather starts at a later call
  // once it is in, or (wait) when it has been read here.
  void prefetch_unit(size_t u, Use use, bool wait = false);
  // Prefetches the units after u in the given direction (+1 forward, -1 backward, wrapping
  // from the root unit to the last) within stage3_prefetch_bucket_size elements.
  void prefetch_ahead(size_t u, int direction);
  void check_zeropp();
  void release_unit(size_t u);
  void release_group(Group& g);
  Tensor param_view(Group& g) const;  // the part of the parameters this rank updates
  // grads: per group, what the step updates from. Note [ZeRO under tensor parallelism]:
  // each parameter's part of them and how the parameter is split over tp; the sum of the
  // partial ones over tp; the norm of the whole model's gradient (optim/clip.h).
  struct GradPiece {
    size_t group;
    Tensor grad;
    nn::TensorSplit split;
  };
  std::vector<GradPiece> grad_pieces(const std::vector<Tensor>& grads) const;
  void sum_partial_gradients(const std::vector<Tensor>& grads);
  double grad_norm(const std::vector<Tensor>& grads) const;
  double stored_grad_norm() const;                 // the norm of gradients the store keeps
  double gradient_unscale() const;  // what averages the reduced gradients and undoes the loss scale
  // Each group's Adam constants of step t at rate lr (a row of `rows`, (groups,
  // kAdamWConstants) f32 on the host: Note [Adam's constants in memory]).
  void write_constants(const optim::AdamWOptions& o, double lr, int64_t t, const Tensor& rows) const;
  // Whether every sub-group's update runs on the device, in one multi-tensor call (the state
  // in the device's memory, the parameters not offloaded).
  bool updates_on_device() const;
  void clear_gradients();
  // The squared norm of the whole model's gradient, left on the device (its counted parts'
  // squares, all-reduced over the ranks holding the rest).
  Tensor squared_grad_norm(const std::vector<Tensor>& grads) const;
  // Whether group i's gradient counts in the norm: a tied parameter once, on its tie
  // group's rank 0 (an inf or NaN in it is there too); stage 0 with experts spread, a
  // replica on one rank of dp or edp (Note [ZeRO with experts]).
  bool counted_in_norm(size_t group) const;
  bool replicated_experts() const { return config_.stage == 0 && experts_.spread(); }
  void sum_tied_gradients();
  void launch(Group& g);
  void prescale(const Tensor& grad);  // by 1/gradient_predivide_factor, before a reduction
  void complete(Pending& p);
  void drain(bool wait_all);

  ZeroConfig config_;
  optim::LossScaler scaler_;
  optim::AdamWOptions adamw_;
  parallel::CommunicatorPtr dp_, tp_;
  PipelinePlacement pipeline_;
  ZeroPlusPlusGroups zeropp_;
  ExpertPlacement experts_;
  std::vector<int> node_order_;  // qgZ: the dp rank at (node, local position), node-major
  std::unique_ptr<HierarchicalReducer> reducer_;  // qgZ
  std::vector<Unit> units_;
  Device device_;  // where the parameters and every buffer live
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<ParamSwap> param_swap_;  // offloaded parameters: where partitioned groups' shards live
  std::vector<Group> groups_;
  std::vector<std::vector<Group*>> unit_groups_;  // groups of each unit
  std::vector<Pending> pending_;
  bool last_micro_ = true;
  bool held_ = false;  // stage 3: gather_all() holds every unit gathered until release_all()
  int64_t steps_ = 0;  // with the loss scale on the device: the steps decided (taken or skipped)
  double lr_ = 0;      // the prepared step's (prepare_step)
  Delayed delayed_;
  Tensor step_constants_;  // read_constants_from_device(): (groups, kAdamWConstants) f32 on device_
  std::unique_ptr<DeviceLossScale> device_scale_;  // Note [Loss scale on the device]; else null
};

}  // namespace triad::zero
