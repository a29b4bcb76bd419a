#include "bench/zero.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "bench/quantize.h"
#include "bench/workers.h"
#include "common/report.h"
#include "config/config.h"
#include "engine/engine.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "triad.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

// The ZeRO++ variants --zeropp accepts, as zero_optimization keys over stage 3; hpZ
// partitions over an emulated node.
const std::vector<std::string> kVariants = {"qwz", "hpz", "qgz", "all"};

void set_variant(nlohmann::json& zero, const std::string& variant, int ranks_per_node) {
  if (variant == "qwz" || variant == "all") zero["zero_quantized_weights"] = true;
  if (variant == "hpz" || variant == "all") zero["zero_hpz_partition_size"] = ranks_per_node;
  if (variant == "qgz" || variant == "all") zero["zero_quantized_gradients"] = true;
}

// The training config of one (ranks, stage, ZeRO++ variant) run: --config with its --set
// overrides (or a preset model with AdamW as `step` runs it), the global batch, the stage,
// and with --zeropp, nodes of --ranks-per-node ranks and the variant's keys.
engine::TrainConfig make_config(const ZeroOptions& o, int stage, int ranks, const std::string& variant = "") {
  nlohmann::json json;
  if (!o.config.empty()) {
    json = engine::load_config_file(o.config);
  } else {
    json = preset_config_json(o.model);
  }
  for (const std::string& s : o.overrides) engine::apply_override(json, s);
  json.erase("train_micro_batch_size_per_gpu");
  json.erase("gradient_accumulation_steps");
  json["train_batch_size"] = o.batch;
  // The schedule is irrelevant to timing; keep a config's steps so its warmup stays valid.
  json["steps"] = std::max<int64_t>(json.value("steps", int64_t(0)), int64_t(o.warmup + o.steps));
  json["zero_optimization"]["stage"] = stage;
  if (!o.zeropp.empty()) json["cluster"]["ranks_per_node"] = o.ranks_per_node;
  if (!variant.empty()) set_variant(json["zero_optimization"], variant, o.ranks_per_node);
  engine::TrainConfig c = engine::parse_config(json, ranks);
  require_gpt2(c, o.config);
  TRIAD_CHECK(o.seq <= c.model.seq_len, "--seq " << o.seq << " exceeds the model's seq_len " << c.model.seq_len);
  return c;
}

// ---------------------------------------------------------------------------------------
// Worker: one (ranks, stage) run under mpirun.

// Every rank must run the same options (workers.h). Compared before any other collective.
void check_ranks_agree(parallel::Communicator& world, const ZeroOptions& o) {
  std::ostringstream s;
  s << o.model << '|' << o.config << '|' << o.batch << '|' << o.seq << '|' << o.steps << '|' << o.warmup << '|'
    << o.stage << '|' << o.threads << '|' << o.variant << '|' << o.ranks_per_node;
  for (const std::string& x : o.zeropp) s << '|' << x;
  for (const std::string& x : o.overrides) s << '|' << x;
  bench::check_ranks_agree(world, s.str(), "zero");
}

int run_worker(const ZeroOptions& o) {
  TRIAD_CHECK(parallel::launched_by_mpirun(),
              "triad-bench zero --worker runs under mpirun; run `triad-bench zero` without --worker instead");
  int argc = 0;
  char** argv = nullptr;
  const parallel::CommunicatorPtr world = parallel::init(argc, argv);
  const int n = world->size(), rank = world->rank();
  const int threads = app::set_threads(parallel::threads_per_rank(o.threads));
  check_ranks_agree(*world, o);

  const engine::TrainConfig config = make_config(o, o.stage, n, o.variant);
  // With model.tensor_parallel (--set), tp consecutive ranks split the model and the rest of
  // the ranks are data-parallel, as triad-train lays them out.
  const engine::GridPtr grid = engine::process_grid(config, world);
  const parallel::CommunicatorPtr& dp = grid->dp();
  const int d = dp->size();
  engine::Engine engine(config, grid);
  const nn::GPTConfig& m = config.model;

  // The fixed global batch (as `step` draws it); this data-parallel rank's rows
  // [r*B/d, (r+1)*B/d).
  const Tensor all = random_token_ids(o.batch, o.seq + 1, m.vocab_size, 7);
  const int64_t rows = o.batch / d;
  const Tensor mine = ops::narrow(all, 0, dp->rank() * rows, rows);
  const Tensor x = ops::contiguous(ops::narrow(mine, 1, 0, o.seq)), y = ops::contiguous(ops::narrow(mine, 1, 1, o.seq));

  const int total_steps = o.warmup + o.steps;
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;  // every step, this rank
  nlohmann::json comm;
  double loss_value = 0, tp_bus = 0;
  for (int s = 0; s < total_steps; ++s) {
    world->barrier();  // every rank starts the step together: the max over ranks is the step's time
    const auto t0 = Clock::now();
    const Tensor loss = engine.forward(x, y);
    const double f = app::ms_since(t0);
    const auto t1 = Clock::now();
    engine.backward(loss);
    const double b = app::ms_since(t1);
    const auto t2 = Clock::now();
    const engine::StepResult r = engine.step();
    const double u = app::ms_since(t2), total = app::ms_since(t0);
    step_ms.push_back(total), fwd_ms.push_back(f), bwd_ms.push_back(b), opt_ms.push_back(u);
    comm = r.comm;
    if (r.comm.contains("tp")) tp_bus = r.comm["tp"]["bus_bytes"].get<double>();
    loss_value = loss.item();
    TRIAD_CHECK(std::isfinite(loss_value) && std::isfinite(r.grad_norm),
                "triad-bench zero: loss " << loss_value << ", gradient norm " << r.grad_norm << " at step " << s + 1);
  }

  // Per step, the slowest rank; then the median over the timed steps.
  std::vector<double> joined;
  for (const auto* v : {&step_ms, &fwd_ms, &bwd_ms, &opt_ms}) joined.insert(joined.end(), v->begin(), v->end());
  const auto comm_bytes = [&comm](const char* key) { return comm.is_null() ? 0.0 : comm[key].get<double>(); };
  const double bus = comm_bytes("bus_bytes");
  zero::ResidentBytes mem = engine.memory();
  std::string mem_source = "zero";
  if (mem.param_bytes == 0) {  // one rank, stage 0, fp32: Engine runs plain AdamW (weights, grads, two moments)
    const int64_t psi = engine.model().num_parameters() * 4;
    mem = {.param_bytes = psi, .grad_bytes = psi, .optim_bytes = 2 * psi, .buffer_bytes = 0};
    mem_source = "plain AdamW (no ZeRO at 1 rank, stage 0)";
  }
  joined.insert(joined.end(), {bus, double(mem.param_bytes), double(mem.grad_bytes), double(mem.optim_bytes),
                               double(mem.buffer_bytes), tp_bus, comm_bytes("intra_node_bus_bytes"),
                               comm_bytes("inter_node_bus_bytes")});
  const std::vector<double> mx = max_over_ranks(*world, joined);
  auto timed = [&](int which) {
    const auto begin = mx.begin() + which * total_steps;
    return std::vector<double>(begin + o.warmup, begin + total_steps);
  };
  const size_t tail = size_t(4 * total_steps);

  if (rank == 0) {
    const double psi = double(m.num_parameters());
    const double local = double(engine.model().num_parameters());  // this rank's: its tp part
    const double elt = double(element_size(config.precision.dtype));  // bytes of a parameter or gradient
    const double med = app::median(timed(0));
    const double tokens_per_step = double(o.batch * o.seq);
    const double tps = tokens_per_step / (med / 1e3);
    const double flops_per_token = 6.0 * psi + 6.0 * double(m.n_layer * m.d_model * o.seq);
    nlohmann::json by = comm.is_null() ? nlohmann::json::object() : comm["by_collective"];
    for (auto it = by.begin(); it != by.end();)  // keep the collectives that were used
      it = it.value().value("calls", int64_t(0)) == 0 ? by.erase(it) : std::next(it);
    app::print_json_line({{"ranks", n},
                          {"tp", config.tensor_parallel},
                          {"dp", d},
                          {"stage", o.stage},
                          {"zeropp", o.variant},
                          {"params", int64_t(psi)},
                          {"threads_per_rank", threads},
                          {"step_ms_median", med},
                          {"fwd_ms_median", app::median(timed(1))},
                          {"bwd_ms_median", app::median(timed(2))},
                          {"optim_ms_median", app::median(timed(3))},
                          {"step_ms", timed(0)},
                          {"tokens_per_s", tps},
                          {"achieved_gflops", flops_per_token * tps / 1e9},
                          {"bus_bytes", mx[tail]},
                          // ZeRO's bus traffic over dp (zero_optimizer.h): 2Ψ(d−1)/d elements, 3Ψ(d−1)/d at
                          // stage 3 (where groups under stage3_param_persistence_threshold move 2Ψ, not 3Ψ), Ψ
                          // this rank's parameters (its tp part)
                          {"bus_bytes_expected", (o.stage >= 3 ? 3.0 : 2.0) * local * double(d - 1) / double(d) * elt},
                          {"tp_bus_bytes", mx[tail + 5]},
                          {"intra_node_bus_bytes", mx[tail + 6]},
                          {"inter_node_bus_bytes", mx[tail + 7]},
                          {"by_collective", by},
                          {"mem",
                           {{"param_bytes", mx[tail + 1]},
                            {"grad_bytes", mx[tail + 2]},
                            {"optim_bytes", mx[tail + 3]},
                            {"buffer_bytes", mx[tail + 4]}}},
                          {"mem_source", mem_source},
                          {"final_loss", loss_value}});
  }
  return 0;
}

// ---------------------------------------------------------------------------------------
// Parent: launches the workers and reports.

nlohmann::json run_one(const ZeroOptions& o, const WorkerLauncher& launcher, int n, int stage,
                       const std::string& variant) {
  std::vector<std::string> args = {"--stage", std::to_string(stage), "--model", o.model};
  if (!o.config.empty()) args.insert(args.end(), {"--config", o.config});
  for (const std::string& s : o.overrides) args.insert(args.end(), {"--set", s});
  args.insert(args.end(),
              {"--batch", std::to_string(o.batch), "--seq", std::to_string(o.seq), "--steps", std::to_string(o.steps),
               "--warmup", std::to_string(o.warmup), "--threads", std::to_string(o.threads)});
  std::string label = "ranks " + std::to_string(n) + ", stage " + std::to_string(stage);
  if (!o.zeropp.empty()) {
    for (const std::string& v : o.zeropp) args.insert(args.end(), {"--zeropp", v});
    args.insert(args.end(), {"--ranks-per-node", std::to_string(o.ranks_per_node)});
  }
  if (!variant.empty()) args.insert(args.end(), {"--variant", variant}), label += " + ZeRO++ " + variant;
  return launcher.run(n, args, label, "step_ms_median");
}

// One worker run of the sweep: a stage, or a ZeRO++ variant over stage 3.
struct SweepRun {
  int stage;
  std::string variant;
};

// Stage 0 first (the other rows show their step time over it); with --zeropp, stage 3
// (added when --stages lacks it) and then each variant (rows over stage 3's inter-node bytes).
std::vector<SweepRun> sweep(const ZeroOptions& o) {
  std::vector<int> stages = o.stages;
  if (!o.zeropp.empty() && std::find(stages.begin(), stages.end(), 3) == stages.end()) stages.push_back(3);
  std::stable_partition(stages.begin(), stages.end(), [](int s) { return s == 0; });
  std::vector<SweepRun> runs;
  for (int s : stages) runs.push_back({s, ""});
  for (const std::string& v : o.zeropp) runs.push_back({3, v});
  return runs;
}

void check_zeropp_options(const ZeroOptions& o) {
  for (const std::string& v : o.zeropp)
    TRIAD_CHECK(std::find(kVariants.begin(), kVariants.end(), v) != kVariants.end(),
                "--zeropp: unknown variant '" << v << "'; choose from qwz, hpz, qgz, all");
  if (o.zeropp.empty()) return;
  TRIAD_CHECK(o.ranks_per_node >= 1, "--ranks-per-node must be at least 1, got " << o.ranks_per_node);
  for (int n : o.ranks)
    TRIAD_CHECK(n % o.ranks_per_node == 0, "--zeropp: " << n << " ranks (--ranks) do not fill whole nodes of "
                                                        << o.ranks_per_node << " ranks (--ranks-per-node)");
}

std::string run_label(const SweepRun& r) { return std::to_string(r.stage) + (r.variant.empty() ? "" : "+" + r.variant); }

std::string ratio_text(double ratio) {
  if (ratio <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", ratio);
  return buf;
}

int run_parent(const ZeroOptions& o) {
  TRIAD_CHECK(!parallel::launched_by_mpirun(),
              "triad-bench zero starts its own workers under mpirun; run it without mpirun");
  TRIAD_CHECK(!o.ranks.empty() && !o.stages.empty(), "triad-bench zero: --ranks and --stages need at least one value");
  for (int n : o.ranks) {
    TRIAD_CHECK(n >= 1, "--ranks: rank counts must be at least 1, got " << n);
    TRIAD_CHECK(o.batch % n == 0, "--batch " << o.batch << " is not divisible by " << n << " ranks (--ranks)");
  }
  check_zeropp_options(o);
  const std::vector<SweepRun> runs = sweep(o);
  // Every run's config must parse before anything runs (e.g. a stage not built yet).
  for (int n : o.ranks)
    for (const SweepRun& r : runs) make_config(o, r.stage, n, r.variant);
  const engine::TrainConfig c0 = make_config(o, o.stages.front(), o.ranks.front());
  const WorkerLauncher launcher("zero");
  const int cores = int(std::thread::hardware_concurrency());
  const std::string name = o.config.empty() ? o.model : o.config;
  const bool zeropp = !o.zeropp.empty();

  std::printf(
      "triad-bench zero: %s (L%lld C%lld V%lld), global batch %lld x seq %lld, %d timed steps after %d warmup, "
      "%d cores%s\n",
      name.c_str(), (long long)c0.model.n_layer, (long long)c0.model.d_model, (long long)c0.model.vocab_size,
      (long long)o.batch, (long long)o.seq, o.steps, o.warmup, cores,
      *std::max_element(o.ranks.begin(), o.ranks.end()) > cores ? " (ranks beyond the cores are oversubscribed)" : "");
  nlohmann::json quantize;
  if (zeropp) {
    // The kernels ZeRO++ runs around its collectives, at the config's block sizes: the
    // int8 rows matter at the weights' block, the int4 rows at the gradients'.
    for (const auto& [what, block] : {std::pair<std::string, int64_t>{"weights", c0.zero.weight_quantization_block},
                                      {"gradients", c0.zero.gradient_quantization_block}}) {
      QuantizeOptions q;
      q.block = block;
      std::printf("quantization kernels, the %s' blocks of %lld, against this machine's memory bandwidth:\n",
                  what.c_str(), (long long)q.block);
      const QuantizeFigures figures = measure_quantize(q);
      print_quantize_table(figures);
      quantize[what] = quantize_json(q, figures);
    }
    std::printf("ZeRO++ rows (stage 3+variant) on nodes of %d ranks; inter MB: bus bytes between nodes, "
                "\"x st3\" their ratio to stage 3's\n",
                o.ranks_per_node);
  }
  std::printf(
      "ms/step: median over steps of the slowest rank; bus MB: this rank's bus bytes per step (nccl-tests "
      "definition), expected 2Ψ(n−1)/n elements (3Ψ at stage 3); state MB: param + grad + optim bytes resident per "
      "rank (max)\n");
  std::printf("%5s %6s %9s %7s %9s %8s %9s %9s %8s %8s %8s %9s", "ranks", "stage", "ms/step", "x st0", "tokens/s",
              "GFLOP/s", "bus MB", "expect MB", "param MB", "grad MB", "optim MB", "state MB");
  if (zeropp) std::printf(" %9s %9s %7s", "intra MB", "inter MB", "x st3");
  std::printf("\n");
  std::fflush(stdout);

  nlohmann::json rows = nlohmann::json::array(), ratios = nlohmann::json::array();
  const double MB = 1e6;
  for (int n : o.ranks) {
    double stage0_ms = 0, stage3_inter = 0;
    for (const SweepRun& run : runs) {
      nlohmann::json row = run_one(o, launcher, n, run.stage, run.variant);
      const double ms = row["step_ms_median"].get<double>(), inter = row["inter_node_bus_bytes"].get<double>();
      if (run.stage == 0) stage0_ms = ms;
      if (run.stage == 3 && run.variant.empty()) stage3_inter = inter;
      nlohmann::json ratio = {{"ranks", n}, {"stage", run.stage}, {"zeropp", run.variant}};
      double vs0 = 0, vs3 = 0;
      if (stage0_ms > 0) row["step_ms_vs_stage0"] = ratio["step_ms_vs_stage0"] = vs0 = ms / stage0_ms;
      if (!run.variant.empty() && stage3_inter > 0)
        row["inter_node_bytes_vs_stage3"] = ratio["inter_node_bytes_vs_stage3"] = vs3 = inter / stage3_inter;
      if ((run.stage != 0 && vs0 > 0) || vs3 > 0) ratios.push_back(ratio);
      const nlohmann::json& mem = row["mem"];
      const double p = mem["param_bytes"].get<double>(), g = mem["grad_bytes"].get<double>(),
                   u = mem["optim_bytes"].get<double>();
      std::printf("%5d %6s %9.1f %7s %9.0f %8.2f %9.3f %9.3f %8.2f %8.2f %8.2f %9.2f", n, run_label(run).c_str(), ms,
                  ratio_text(vs0).c_str(), row["tokens_per_s"].get<double>(), row["achieved_gflops"].get<double>(),
                  row["bus_bytes"].get<double>() / MB, row["bus_bytes_expected"].get<double>() / MB, p / MB, g / MB,
                  u / MB, (p + g + u) / MB);
      if (zeropp)
        std::printf(" %9.3f %9.3f %7s", row["intra_node_bus_bytes"].get<double>() / MB, inter / MB,
                    ratio_text(vs3).c_str());
      std::printf("\n");
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }
  if (!ratios.empty()) {
    std::printf("against stage 0 (step time) and stage 3 (inter-node bytes) on the same ranks:");
    for (const auto& r : ratios) {
      std::printf("  n=%d %s:", r["ranks"].get<int>(), run_label({r["stage"].get<int>(), r["zeropp"].get<std::string>()}).c_str());
      if (r.contains("step_ms_vs_stage0")) std::printf(" %.2fx time", r["step_ms_vs_stage0"].get<double>());
      if (r.contains("inter_node_bytes_vs_stage3"))
        std::printf(" %.3fx inter-node", r["inter_node_bytes_vs_stage3"].get<double>());
    }
    std::printf("\n");
  }
  nlohmann::json result = {{"bench", "zero"},
                           {"model", name},
                           {"params", rows.empty() ? 0 : rows[0]["params"].get<int64_t>()},
                           {"batch", o.batch},
                           {"seq", o.seq},
                           {"steps", o.steps},
                           {"warmup", o.warmup},
                           {"cores", cores},
                           {"ranks", o.ranks},
                           {"stages", o.stages},
                           {"rows", rows},
                           {"ratios", ratios}};
  if (zeropp) result["zeropp"] = o.zeropp, result["ranks_per_node"] = o.ranks_per_node, result["quantize"] = quantize;
  app::print_json_line(result);
  return 0;
}

}  // namespace

int run_zero_bench(const ZeroOptions& o) { return o.worker ? run_worker(o) : run_parent(o); }

}  // namespace triad::bench
