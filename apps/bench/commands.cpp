// The command line of every benchmark: each `triad-bench <name>` subcommand's options and
// what they fill in. One file, so that CLI11 (header-only, seconds of compile per file
// that includes it) is compiled once for all of them; the benchmarks' own files only see
// their options structs.
#include <CLI/CLI.hpp>

#include "bench/attention.h"
#include "bench/ckpt.h"
#include "bench/collectives.h"
#include "bench/generate.h"
#include "bench/moe.h"
#include "bench/offload.h"
#include "bench/pipeline.h"
#include "bench/quantize.h"
#include "bench/quantized.h"
#include "bench/rlhf.h"
#include "bench/scaling.h"
#include "bench/step.h"
#include "bench/workers.h"
#include "bench/zero.h"

namespace triad::bench {

void add_attention_command(CLI::App& app, AttentionOptions& o, int& status) {
  CLI::App* cmd = app.add_subcommand(
      "attention", "the fused causal attention, forward and backward, in TFLOP/s beside a GEMM in the same run");
  cmd->add_option("--device", o.device, "cpu, cuda (this process's GPU) or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "bf16, f16 or f32; default bf16 on a GPU, f32 on the cpu")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  cmd->add_option("--batch", o.batch, "B (default: 16 on a GPU, 2 on the cpu)")->check(CLI::PositiveNumber);
  cmd->add_option("--heads", o.heads, "NH (default: 12 on a GPU, 4 on the cpu)")->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o.seq, "T (default: 1024 on a GPU, 128 on the cpu)")->check(CLI::PositiveNumber);
  cmd->add_option("--head-size", o.head_size, "hs (default: 64)")->check(CLI::PositiveNumber);
  cmd->add_option("--gemm", o.gemm, "the GEMM's M = N = K (default: 8192 on a GPU, 256 on the cpu)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--iters", o.iters, "timed calls of each kernel")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed calls first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: default)")->capture_default_str();
  cmd->callback([&o, &status] { status = run_attention_bench(o); });
}

void add_ckpt_command(CLI::App& app, CkptOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "ckpt", "time checkpoint save/load against plain file I/O of the same bytes (launches itself under mpirun)");
  cmd->add_option("--model", o.model, "model preset: tiny, gpt2-124m, gpt2-350m")->capture_default_str();
  add_ranks_option(*cmd, o.ranks);
  cmd->add_option("--dir", o.dir,
                  "folder to write in (a fresh subfolder, removed afterwards; default: the system temp dir)");
  cmd->add_option("--repeats", o.repeats, "timed repeats of each path (medians reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed rounds first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads per rank (0: cores / ranks, at least 1)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--cached", o.cached, "keep the files' pages cached before reads (default: drop them, both paths)");
  cmd->add_flag("--worker", o.worker, "internal: run one rank count under mpirun (--dir is its folder)")->group("");
  cmd->callback([&o] { run_ckpt_bench(o); });
}

void add_collectives_command(CLI::App& app, CollectivesOptions& o, int& status) {
  CLI::App* cmd = app.add_subcommand(
      "collectives",
      "nccl-tests-style sweep of the communicator's collectives beside the raw MPI or NCCL calls (under mpirun)");
  cmd->add_option("--ops", o.ops,
                  "comma-separated: all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, sendrecv")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--min-bytes", o.min_bytes, "smallest size S (K, M, G: powers of 1024)")->capture_default_str();
  cmd->add_option("--max-bytes", o.max_bytes, "largest size S")->capture_default_str();
  cmd->add_option("--factor", o.factor, "size multiplier between rows")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed calls before each timed block")->capture_default_str();
  cmd->add_option("--iters", o.iters, "timed calls per block")->capture_default_str();
  cmd->add_option("--rounds", o.rounds, "timed blocks per case, triad's and the raw call's alternating; median")
      ->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "element type: f32, f64, bf16, f16, i64, i32, i8")->capture_default_str();
  cmd->add_option("--check", o.check, "1: check every result (#wrong); 0: skip the check")->capture_default_str();
  cmd->add_option("--root", o.root, "broadcast's root rank")->capture_default_str();
  cmd->add_option("--raw", o.raw,
                  "--comm mpi's raw calls: nonblocking (MPI_I<coll> + MPI_Wait, MPI's own non-blocking calls, which "
                  "the communicator makes or replaces by exchanges of messages) or blocking")
      ->capture_default_str();
  cmd->add_option("--comm", o.comm,
                  "communicator under test: mpi (host buffers) or nccl (a GPU per rank; a build with CUDA and NCCL)")
      ->capture_default_str();
  cmd->callback([&o, &status] { status = run_collectives_bench(o); });
}

void add_generate_command(CLI::App& app, GenerateOptions& o) {
  CLI::App* cmd = app.add_subcommand("generate", "batched generation (RLHF's sampling loop): generated tokens/s");
  cmd->add_option("--model", o.model, "preset: tiny, gpt2-124m, ...")->capture_default_str();
  cmd->add_option("--config", o.config, "a triad-train config whose model to use");
  cmd->add_option("--set", o.overrides, "override a key of the preset or --config: dotted.key=value (repeatable)");
  cmd->add_option("--batch", o.batch, "prompts generated together")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--prompt", o.prompt, "tokens per prompt")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--answer", o.answer, "tokens generated per prompt")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", o.top_k, "top-k (0: no limit)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o.top_p, "top-p (1: no limit)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--device", o.device, "cpu, cuda (this process's GPU) or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "f32, or bf16; default f32 on the cpu, bf16 on a GPU")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--runs", o.runs, "timed generate calls")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed calls first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: default)")->capture_default_str();
  cmd->add_flag("!--no-cuda-graph", o.cuda_graph, "launch every kernel of every decode step (no CUDA graph)");
  cmd->add_flag("--check-eager", o.check_eager,
                "also time the calls without CUDA graphs and fail unless they generate the same tokens");
  cmd->callback([&o] { run_generate_bench(o); });
}

void add_moe_command(CLI::App& app, MoEBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand("moe", "time training steps of a GPT with MoE blocks against the dense GPT");
  cmd->add_option("--model", o.model, "GPT preset: tiny, gpt2-124m, gpt2-350m")->capture_default_str();
  cmd->add_option("--experts", o.experts, "experts per MoE block")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", o.top_k, "experts per token")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--every", o.every, "an MoE block every n-th block")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--capacity-factor", o.capacity_factor, "slots per expert, over tokens x k / experts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dropless", o.dropless, "route every choice (no capacity): the variable-size exchange");
  cmd->add_option("--batch", o.batch, "sequences per step")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: default)")->capture_default_str();
  cmd->add_option("--steps", o.steps, "timed steps of each model")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--ep", o.ep, "expert-parallel ranks (under mpirun -np a multiple of it)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", o.device, "cpu, cuda (this rank's GPU) or cuda:N")->capture_default_str();
  cmd->add_flag("--compare-loop", o.compare_loop,
                "also time the MoE steps with the experts run one by one instead of as grouped GEMMs");
  cmd->callback([&o] { run_moe_bench(o); });
}

void add_offload_command(CLI::App& app, OffloadBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand("offload", "NVMe swap file throughput against raw O_DIRECT, and a ZeRO-3 step "
                                                "with parameters and optimizer on NVMe against in memory");
  cmd->add_option("--dir", o.dir, "folder for the files (nvme_path)");
  cmd->add_option("--megabytes", o.megabytes, "MiB per transfer")->check(CLI::PositiveNumber);
  cmd->add_option("--repeats", o.repeats, "timed transfers of each kind (medians)")->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", o.aio.block_size, "aio block_size, bytes");
  cmd->add_option("--queue-depth", o.aio.queue_depth, "aio queue_depth");
  cmd->add_option("--threads-per-transfer", o.aio.intra_op_parallelism, "aio intra_op_parallelism");
  cmd->add_option("--steps", o.steps, "timed training steps of each run")->check(CLI::PositiveNumber);
  cmd->add_option("--layers", o.n_layer, "GPT layers of the step's model");
  cmd->add_option("--d-model", o.d_model, "GPT width of the step's model");
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: one per core)");
  cmd->callback([&o] { run_offload_bench(o); });
}

void add_pipeline_command(CLI::App& app, PipelineOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "pipeline", "measure each pipeline schedule's bubble against its closed form (launches itself under mpirun)");
  cmd->add_option("--model", o.model, "model preset: tiny, gpt2-124m, gpt2-350m")->capture_default_str();
  cmd->add_option("--config", o.config, "take model, optimizer and clipping from a triad-train config");
  cmd->add_option("--set", o.overrides, "override a config key: dotted.key=value (repeatable; replaces the defaults)")
      ->capture_default_str();
  cmd->add_option("--stages", o.stages, "pipeline stages p, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--schedules", o.schedules, "schedules, comma-separated (pipeline.schedule)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--micro-factors", o.micro_factors, "micro-batches per step as multiples of p, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--virtual-stages", o.virtual_stages, "chunks per rank of the interleaved schedule")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--partition", o.partition, "pipeline.partition")->capture_default_str();
  cmd->add_option("--micro-batch", o.micro_batch, "sequences per micro-batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--steps", o.steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--out", o.out, "folder for pipeline.csv, pipeline.gp and pipeline.png");
  cmd->add_flag("--worker", o.worker, "internal: run one measurement under mpirun")->group("");
  cmd->add_option("--schedule", o.schedule, "internal: the worker's schedule")->group("");
  cmd->add_option("--micro-batches", o.micro_batches, "internal: the worker's micro-batches per step")->group("");
  cmd->callback([&o] { run_pipeline_bench(o); });
}

void add_quantize_command(CLI::App& app, QuantizeOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "quantize", "ZeRO++'s block quantization kernels on the cpu, in GB/s and as a fraction of stream bandwidth");
  cmd->add_option("--elements", o.elements, "values quantized (and stream array length, in doubles)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--block", o.block, "elements per quantization block (even: 4-bit blocks are whole bytes)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->check(CLI::Validator([](const std::string& v) { return std::stoll(v) % 2 ? v + " is odd" : std::string(); },
                             "EVEN"));
  cmd->add_option("--slices", o.slices, "slices summed by dequantize_reduce")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", o.dtype, "dtype of the values")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: one per core)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--repeats", o.repeats, "timed runs per kernel (medians)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([&o] { run_quantize_bench(o); });
}

void add_quantized_command(CLI::App& app, QuantizedOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "quantized",
      "the integer GEMM of quantized linears (W8A8, W4A8) against the f32 and bf16 GEMMs in TOPS, then W8A8 "
      "generation against f32 and bf16 in tokens/s");
  cmd->add_option("--device", o.device, "cpu, cuda (this process's GPU) or cuda:N")->capture_default_str();
  cmd->add_option("--tokens", o.tokens, "token counts M")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--shapes", o.shapes, "(K in, N out) pairs of the weights")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--group-size", o.group_size, "inputs sharing one weight scale (divides every K; a multiple of 4)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: one per core)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--repeats", o.repeats, "timed runs per GEMM (medians)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batches", o.batches, "generation: prompts per call (0: no generation)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--prompt", o.prompt, "generation: tokens per prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--answer", o.answer, "generation: tokens generated per prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--model", o.model,
                  "generation: GPT preset (default: gpt2-124m on a GPU, the RLHF demo's actor on the cpu)");
  cmd->callback([&o] { run_quantized_bench(o); });
}

void add_rlhf_command(CLI::App& app, RlhfBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "rlhf", "one PPO step split into generation and training, per ZeRO stage and rank count (launches itself under mpirun)");
  cmd->add_option("--model", o.model, "model preset: tiny, gpt2-124m, gpt2-350m")->capture_default_str();
  cmd->add_option("--config", o.config, "take model, optimizer and clipping from a triad-train config");
  cmd->add_option("--set", o.overrides, "override a config key: dotted.key=value (repeatable)")->capture_default_str();
  add_sweep_options(*cmd, o.ranks, o.stages);
  cmd->add_option("--batch", o.batch, "prompts per step (divisible by every rank count)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prompt", o.prompt, "tokens per prompt")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--answer", o.answer, "generated tokens at most")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--steps", o.steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads per rank (0: cores / ranks, at least 1)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--worker", o.worker, "internal: run one (ranks, stage) measurement under mpirun")->group("");
  cmd->add_option("--stage", o.stage, "internal: the worker's stage")->group("");
  cmd->add_option("--work", o.work, "internal: the folder of inputs")->group("");
  cmd->callback([&o] { run_rlhf_bench(o); });
}

void add_scaling_command(CLI::App& app, ScalingOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "scaling",
      "weak or strong scaling over 1..n ranks per ZeRO stage, measured beside the performance model's prediction "
      "(launches itself under mpirun; writes DIR/scaling.csv and DIR/scaling.png)");
  cmd->add_option("--mode", o.mode, "weak (--batch per rank) or strong (--batch global)")
      ->capture_default_str()
      ->check(CLI::IsMember({"weak", "strong"}));
  cmd->add_option("--model", o.model, "model preset: tiny, gpt2-124m, gpt2-350m")->capture_default_str();
  cmd->add_option("--config", o.config, "take model, optimizer, zero and cluster keys from a triad-train config");
  cmd->add_option("--set", o.overrides, "override a config key: dotted.key=value (repeatable)");
  add_sweep_options(*cmd, o.ranks, o.stages);
  cmd->add_option("--tp", o.tp, "tensor-parallel ranks per group: every point is ranks/TP groups of TP ranks")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", o.batch, "sequences: per rank (weak) or global (strong, divisible by every rank count)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads per rank")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--steps", o.steps, "timed steps per point")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--repeats", o.repeats, "runs of every point (and of the compute calibration); medians")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", o.out, "folder for scaling.csv, scaling.gp and scaling.png (required)");
  cmd->add_option("--interconnect", o.interconnect,
                  "the model's machine: calibrate (measure this one: compute rate, shared-memory link) or config (the "
                  "config's cluster section)")
      ->capture_default_str()
      ->check(CLI::IsMember({"calibrate", "config"}));
  cmd->add_option("--flops", o.flops,
                  "compute rate per rank for the model, FLOP/s (replaces the measured or "
                  "configured one)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--worker", o.worker, "internal: run the collectives calibration under mpirun")->group("");
  cmd->add_option("--max-bytes", o.max_bytes, "internal: the calibration's largest collective")->group("");
  cmd->callback([&o] { run_scaling_bench(o); });
}

void add_step_command(CLI::App& app, StepOptions& o) {
  CLI::App* cmd = app.add_subcommand("step", "time full training steps (forward, backward, AdamW) of a GPT");
  cmd->add_option("--model", o.model, "GPT preset: tiny, gpt2-124m, gpt2-350m (GPU default: gpt2-124m)")
      ->capture_default_str();
  cmd->add_option("--config", o.config,
                  "take the model (a GPT or a Llama) from a triad-train config instead of a preset");
  cmd->add_option("--set", o.overrides, "override a key of --config: dotted.key=value (repeatable)");
  cmd->add_option("--batch", o.batch, "sequences per step (GPU default: 16)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o.seq, "tokens per sequence (GPU default: 1024)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", o.device, "cpu, cuda (this rank's GPU) or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "f32, or bf16 (mixed precision); default f32 on the cpu, bf16 on a GPU")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--peak-tflops", o.peak_tflops,
                  "the device's dense bf16 peak for MFU (default: from the GPU's name, else 989 as H100/H200 SXM)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: default)")->capture_default_str();
  cmd->add_option("--steps", o.steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--checkpointing", o.checkpointing, "recompute each block in the backward pass");
  cmd->add_option("--tp", o.tp, "tensor-parallel ranks: split the model over the ranks of mpirun -np TP")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--sequence-parallel", o.sequence_parallel, "with --tp: split LayerNorm and dropout along the sequence");
  cmd->add_flag("--cuda-graph", o.cuda_graph,
                "record the step as a CUDA graph after one plain step and replay it (cuda_graph.enabled); the "
                "phases are then not timed apart");
  cmd->callback([&o, cmd] {
    if (Device::parse(o.device).is_cuda()) {  // the GPU's own default shape, where none was given
      if (cmd->count("--model") == 0) o.model = kGpuModel;
      if (cmd->count("--batch") == 0) o.batch = kGpuBatch;
      if (cmd->count("--seq") == 0) o.seq = kGpuSeq;
    }
    run_step_bench(o);
  });
}

void add_ranks_option(CLI::App& cmd, std::vector<int>& ranks) {
  cmd.add_option("--ranks", ranks, "rank counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}
void add_sweep_options(CLI::App& cmd, std::vector<int>& ranks, std::vector<int>& stages) {
  add_ranks_option(cmd, ranks);
  cmd.add_option("--stages", stages, "ZeRO stages, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
}

void add_zero_command(CLI::App& app, ZeroOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "zero", "time training steps under each ZeRO stage on 1..n ranks (launches itself under mpirun)");
  cmd->add_option("--model", o.model, "model preset: tiny, gpt2-124m, gpt2-350m")->capture_default_str();
  cmd->add_option("--config", o.config, "take model, optimizer and zero keys from a triad-train config");
  cmd->add_option("--set", o.overrides, "override a config key: dotted.key=value (repeatable)");
  add_sweep_options(*cmd, o.ranks, o.stages);
  cmd->add_option("--batch", o.batch, "global batch, sequences (divisible by every rank count)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads per rank (0: cores / ranks, at least 1)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--steps", o.steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--zeropp", o.zeropp, "ZeRO++ variants over stage 3, comma-separated: qwz, hpz, qgz, all")
      ->delimiter(',');
  cmd->add_option("--ranks-per-node", o.ranks_per_node, "with --zeropp: emulated node size (cluster.ranks_per_node)")
      ->capture_default_str();
  cmd->add_flag("--worker", o.worker, "internal: run one (ranks, stage) measurement under mpirun")->group("");
  cmd->add_option("--stage", o.stage, "internal: the worker's stage")->group("");
  cmd->add_option("--variant", o.variant, "internal: the worker's ZeRO++ variant")->group("");
  cmd->callback([&o] { run_zero_bench(o); });
}

}  // namespace triad::bench
