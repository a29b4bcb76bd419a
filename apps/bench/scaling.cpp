// `triad-bench scaling` (see the header). The parent runs without mpirun: it calibrates the
// performance model (unless told the machine by the config), then runs every (ranks,
// stage) point as a `triad-bench zero` worker and reports each beside its prediction. Its
// own worker mode (`scaling --worker`, under mpirun) only runs the collectives sweep of
// the calibration.
#include "bench/scaling.h"


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "bench/collectives.h"
#include "bench/workers.h"
#include "common/report.h"
#include "config/config.h"
#include "parallel/runtime.h"
#include "triad.h"
#include "estimate/model_states.h"
#include "estimate/perf_model.h"

namespace triad::bench {

namespace {

constexpr double kMB = 1e6;

bool weak(const ScalingOptions& o) { return o.mode == "weak"; }
// With --tp, a tensor-parallel group of o.tp ranks is the unit that scales: `ranks` of them
// are ranks / tp data-parallel ranks, each a group taking its own rows of the batch.
int data_parallel(const ScalingOptions& o, int ranks) { return ranks / o.tp; }
int64_t global_batch(const ScalingOptions& o, int ranks) {
  return weak(o) ? o.batch * data_parallel(o, ranks) : o.batch;
}

// The training config of one (ranks, stage) point, as `triad-bench zero` builds it from the
// same options (the worker parses it again from them).
engine::TrainConfig make_config(const ScalingOptions& o, int stage, int ranks) {
  nlohmann::json json = o.config.empty() ? preset_config_json(o.model) : engine::load_config_file(o.config);
  for (const std::string& s : o.overrides) engine::apply_override(json, s);
  json.erase("train_micro_batch_size_per_gpu");
  json.erase("gradient_accumulation_steps");
  json["train_batch_size"] = global_batch(o, ranks);
  json["steps"] = std::max<int64_t>(json.value("steps", int64_t(0)), int64_t(o.warmup + o.steps));
  json["zero_optimization"]["stage"] = stage;
  json["model"]["tensor_parallel"] = o.tp;
  engine::TrainConfig c = engine::parse_config(json, ranks);
  require_gpt2(c, o.config);
  TRIAD_CHECK(o.seq <= c.model.seq_len, "--seq " << o.seq << " exceeds the model's seq_len " << c.model.seq_len);
  return c;
}

// 6Ψ + 6·L·C·T, the FLOPs of training on one token (docs/benchmarks.md, triad-bench step).
double flops_per_token(const nn::GPTConfig& m, int64_t seq) {
  return 6.0 * double(m.num_parameters()) + 6.0 * double(m.n_layer * m.d_model * seq);
}

// The model's view of one point (Note [Step time model]). With --tp the model's "rank" is a
// tensor-parallel group: its compute rate is calibrated on tp ranks (tp collectives
// included), and its ZeRO collectives move each tp rank's part of the parameters over the
// data-parallel ranks.
estimate::StepModelInput model_input(const ScalingOptions& o, const engine::TrainConfig& c, int stage, int ranks) {
  estimate::StepModelInput in;
  const int d = data_parallel(o, ranks);
  const auto sizes = c.model.parameter_sizes(o.tp);
  in.stage = stage;
  in.ranks = d;
  for (const auto& [_, n] : sizes) in.num_params += double(n);
  if (stage == 3)
    in.persistent_params =
        double(estimate::persistent_parameters(sizes, c.zero.stage3_param_persistence_threshold).elements);
  in.element_bytes = double(element_size(c.precision.dtype));
  in.flops_per_token = flops_per_token(c.model, o.seq);
  in.tokens_per_rank = double(global_batch(o, ranks) / d * o.seq);
  in.micro_batches = c.gradient_accumulation_steps;
  in.groups = 2 * (c.model.n_layer + 1);  // a decay and a no-decay group per unit: each block, the root
  in.threads_per_rank = o.threads * o.tp;
  in.overlap_comm = c.zero.overlap_comm;
  return in;
}

// ---------------------------------------------------------------------------------------
// Worker: the collectives sweep of the calibration, under mpirun.

int run_worker(const ScalingOptions& o) {
  TRIAD_CHECK(parallel::launched_by_mpirun(),
              "triad-bench scaling --worker runs under mpirun; run `triad-bench scaling` without --worker instead");
  CollectivesOptions c;
  c.ops = {"all_reduce", "reduce_scatter", "all_gather"};
  c.min_bytes = "1K";
  c.max_bytes = o.max_bytes;
  c.factor = 4;
  c.warmup = 5;
  c.iters = 20;
  c.rounds = 3;
  c.check = 0;  // timing only; `triad-bench collectives` checks the results
  return run_collectives_bench(c);
}

// ---------------------------------------------------------------------------------------
// Parent.

// What the model is told about this machine, and how it was found.
struct Calibration {
  // Measured compute rates, keyed by (sequences per rank, concurrent runs): a point's rate
  // comes from 1-rank stage 0 runs of its own batch per rank (small batches run GEMMs less
  // efficiently), as many at once as the point keeps cores busy (cores shared with another
  // busy process, or sibling hardware threads, are slower than a core alone).
  std::map<std::pair<int64_t, int>, std::vector<double>> compute_ms;  // slowest run's ms/step, per repeat
  std::map<std::pair<int64_t, int>, double> flops;                    // FLOP/s per rank
  // The link fitted at each rank count: n ranks sharing the cores wait for each other in a
  // way a single α/β scaled by the oversubscription does not describe.
  std::map<int, estimate::Link> links;
  std::vector<estimate::CollectiveSample> samples;
  std::string flops_source, link_source;
};

// The zero worker's arguments for one point.
std::vector<std::string> zero_worker_args(const ScalingOptions& o, int stage, int64_t batch) {
  std::vector<std::string> args = {"--stage", std::to_string(stage), "--model", o.model};
  if (!o.config.empty()) args.insert(args.end(), {"--config", o.config});
  for (const std::string& s : o.overrides) args.insert(args.end(), {"--set", s});
  if (o.tp > 1) args.insert(args.end(), {"--set", "model.tensor_parallel=" + std::to_string(o.tp)});
  args.insert(args.end(),
              {"--batch", std::to_string(batch), "--seq", std::to_string(o.seq), "--steps", std::to_string(o.steps),
               "--warmup", std::to_string(o.warmup), "--threads", std::to_string(o.threads)});
  return args;
}

// Runs `k` workers of `ranks` ranks (one rank, or one tensor-parallel group) at once, each its
// own mpirun job, and returns the slowest one's median ms/step.
double slowest_of_concurrent_runs(const WorkerLauncher& launcher, int k, int ranks,
                                  const std::vector<std::string>& args) {
  std::vector<double> ms(static_cast<size_t>(k), 0.0);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(k));
  std::vector<std::thread> threads;
  for (int i = 0; i < k; ++i)
    threads.emplace_back([&, i] {
      try {
        ms[size_t(i)] =
            launcher.run(ranks, args, "the compute calibration (" + std::to_string(ranks) + " rank(s), stage 0)",
                         "step_ms_median")["step_ms_median"]
                .get<double>();
      } catch (...) {
        errors[size_t(i)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return *std::max_element(ms.begin(), ms.end());
}

estimate::Collective collective_of(const std::string& op) {
  if (op == "all_reduce") return estimate::Collective::all_reduce;
  if (op == "reduce_scatter") return estimate::Collective::reduce_scatter;
  TRIAD_CHECK(op == "all_gather", "triad-bench scaling: unexpected collective '" << op << "' in the calibration");
  return estimate::Collective::all_gather;
}

std::string csv_number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// The largest collective a step issues is at most the model's parameter bytes: the sweep
// goes from 1 KiB to the power of 4 at or above them (at least 64 KiB, at most 256 MiB).
std::string calibration_max_bytes(const engine::TrainConfig& c) {
  const double bytes = double(c.model.num_parameters()) * double(element_size(c.precision.dtype));
  int64_t max = int64_t(64) << 10;
  while (double(max) < bytes && max < (int64_t(256) << 20)) max *= 4;
  return std::to_string(max >> 10) + "K";
}

void calibrate_link(const ScalingOptions& o, const engine::TrainConfig& c, int cores, Calibration& cal) {
  const WorkerLauncher launcher("scaling");
  const std::string max_bytes = calibration_max_bytes(c);
  for (int n : o.ranks) {
    if (n < 2) continue;
    std::printf("calibrating the link: collectives on %d ranks, 1K to %s ...\n", n, max_bytes.c_str());
    std::fflush(stdout);
    const nlohmann::json j = launcher.run(n, {"--max-bytes", max_bytes},
                                          "the collectives calibration on " + std::to_string(n) + " ranks", "summary");
    const double over = std::max(1.0, double(n) * double(o.threads) / double(cores));
    for (const nlohmann::json& row : j["rows"])
      cal.samples.push_back({collective_of(row["op"].get<std::string>()), n, row["bytes"].get<double>(),
                             row["time_us"].get<double>() * 1e-6, over});
  }
  if (cal.samples.empty()) return;  // one rank only: no link to fit
  for (int n : o.ranks) {
    std::vector<estimate::CollectiveSample> at_n;
    for (const estimate::CollectiveSample& sample : cal.samples)
      if (sample.ranks == n) at_n.push_back(sample);
    if (at_n.empty()) continue;
    cal.links[n] = estimate::fit_link(at_n);
    cal.link_source += (cal.link_source.empty() ? "" : "; ") + std::to_string(n) + " ranks: " +
                       csv_number(cal.links[n].latency * 1e6) + " us, " +
                       csv_number(cal.links[n].bandwidth / 1e9) + " GB/s";
  }
  cal.link_source = "fitted to " + std::to_string(cal.samples.size()) + " collective timings (" + cal.link_source + ")";
}

// FLOP/s of one rank that trains `batch` sequences per step in `ms`.
double compute_rate(const ScalingOptions& o, const engine::TrainConfig& c, int64_t batch, double ms) {
  return flops_per_token(c.model, o.seq) * double(batch * o.seq) / (ms / 1e3);
}

struct Point {
  int ranks = 0, stage = 0;
  std::vector<nlohmann::json> runs;  // the workers' rows
  double ms = 0;                     // median of the runs' medians
  estimate::StepEstimate predicted;
  double flops = 0;  // the compute rate the prediction used
};

nlohmann::json point_row(const ScalingOptions& o, const Point& p) {
  nlohmann::json row = p.runs.back();
  std::vector<double> ms;
  for (const nlohmann::json& r : p.runs) ms.push_back(r["step_ms_median"].get<double>());
  row["step_ms_runs"] = ms;
  row["step_ms_median"] = p.ms;
  const int64_t batch = global_batch(o, p.ranks);
  row["tokens_per_s"] = double(batch * o.seq) / (p.ms / 1e3);
  return row;
}

void write_gnuplot(const std::string& path, const ScalingOptions& o, const std::string& title) {
  std::ofstream f(path);
  TRIAD_CHECK(f.good(), "triad-bench scaling: cannot write " << path);
  std::string stages;
  for (int s : o.stages) stages += (stages.empty() ? "" : " ") + std::to_string(s);
  std::string xtics;
  for (int n : o.ranks) xtics += (xtics.empty() ? "" : ", ") + std::to_string(n);
  f << "# Draws scaling.png from scaling.csv (written by triad-bench scaling): gnuplot scaling.gp\n"
    << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
    << "  set terminal pngcairo size 1200,800 noenhanced font ',11'\n"
    << "} else {\n"
    << "  set terminal png size 1200,800 noenhanced\n"
    << "}\n"
    << "set output 'scaling.png'\n"
    << "set datafile separator ','\n"
    << "stages = '" << stages << "'\n"
    << "set multiplot layout 1,2 title '" << title << "'\n"
    << "set logscale x 2\n"
    << "set xtics (" << xtics << ")\n"
    << "set xrange [" << *std::min_element(o.ranks.begin(), o.ranks.end()) / 1.2 << ":"
    << *std::max_element(o.ranks.begin(), o.ranks.end()) * 1.2 << "]\n"
    << "set grid\n"
    << "set key bottom left opaque box\n"
    << "set xlabel 'ranks'\n"
    << "set ylabel 'tokens/s'\n"
    << "set yrange [0:*]\n"
    << "set title 'throughput'\n"
    << "plot for [i=1:words(stages)] 'scaling.csv' using 'ranks':(column('stage') == word(stages, i) + 0 ? "
       "column('tokens_per_s') : NaN) with linespoints lc i lw 2 pt 7 title 'stage '.word(stages, i), \\\n"
    << "     for [i=1:words(stages)] 'scaling.csv' using 'ranks':(column('stage') == word(stages, i) + 0 ? "
       "column('pred_tokens_per_s') : NaN) with lines lc i dt 2 notitle, \\\n"
    << "     NaN with lines lc 'black' lw 2 title 'measured', NaN with lines lc 'black' dt 2 title 'predicted'\n"
    << "set ylabel 'scaling efficiency (" << (weak(o) ? "t1 / tN" : "t1 / (N tN)") << ")'\n"
    << "set yrange [0:1.15]\n"
    << "set title '" << o.mode << " scaling efficiency'\n"
    << "plot for [i=1:words(stages)] 'scaling.csv' using 'ranks':(column('stage') == word(stages, i) + 0 ? "
       "column('efficiency') : NaN) with linespoints lc i lw 2 pt 7 title 'stage '.word(stages, i), \\\n"
    << "     for [i=1:words(stages)] 'scaling.csv' using 'ranks':(column('stage') == word(stages, i) + 0 ? "
       "column('pred_efficiency') : NaN) with lines lc i dt 2 notitle, \\\n"
    << "     1 with lines lc 'gray' dt 3 title 'ideal'\n"
    << "unset multiplot\n";
  TRIAD_CHECK(f.good(), "triad-bench scaling: writing " << path << " failed");
}

int run_parent(const ScalingOptions& o) {
  TRIAD_CHECK(!parallel::launched_by_mpirun(),
              "triad-bench scaling starts its own workers under mpirun; run it without mpirun");
  TRIAD_CHECK(o.mode == "weak" || o.mode == "strong", "--mode must be weak or strong, got '" << o.mode << "'");
  TRIAD_CHECK(o.interconnect == "calibrate" || o.interconnect == "config",
              "--interconnect must be calibrate or config, got '" << o.interconnect << "'");
  TRIAD_CHECK(!o.ranks.empty() && !o.stages.empty(),
              "triad-bench scaling: --ranks and --stages need at least one value");
  TRIAD_CHECK(!o.out.empty(), "triad-bench scaling: --out DIR is required (scaling.csv and scaling.png go there)");
  TRIAD_CHECK(o.threads >= 1, "--threads must be at least 1, got " << o.threads);
  TRIAD_CHECK(o.tp >= 1, "--tp must be at least 1, got " << o.tp);
  for (int n : o.ranks) {
    TRIAD_CHECK(n >= 1, "--ranks: rank counts must be at least 1, got " << n);
    TRIAD_CHECK(std::count(o.ranks.begin(), o.ranks.end(), n) == 1, "--ranks: " << n << " is listed twice");
    TRIAD_CHECK(n % o.tp == 0, "--ranks: " << n << " ranks are not a multiple of --tp " << o.tp);
    TRIAD_CHECK(weak(o) || o.batch % data_parallel(o, n) == 0,
                "--batch " << o.batch << " (strong scaling: the global batch) is not divisible by "
                           << data_parallel(o, n) << " data-parallel ranks");
  }
  for (int s : o.stages)
    TRIAD_CHECK(std::count(o.stages.begin(), o.stages.end(), s) == 1, "--stages: " << s << " is listed twice");
  std::vector<int> ranks = o.ranks;
  std::sort(ranks.begin(), ranks.end());
  // Every point's config must parse before anything runs.
  std::map<std::pair<int, int>, engine::TrainConfig> configs;
  for (int n : ranks)
    for (int s : o.stages) configs.emplace(std::make_pair(n, s), make_config(o, s, n));
  const engine::TrainConfig& c0 = configs.at({ranks.front(), o.stages.front()});
  const int cores = int(std::thread::hardware_concurrency());
  const std::string name = o.config.empty() ? o.model : o.config;
  const double psi = double(c0.model.num_parameters());

  // gnuplot must be there before the sweep, not after it.
  TRIAD_CHECK(
      run_program({"gnuplot", "--version"}, "", true) == 0,
      "triad-bench scaling: gnuplot is not on PATH; it draws scaling.png (Debian: apt-get install gnuplot-nox)");
  std::filesystem::create_directories(o.out);

  std::printf(
      "triad-bench scaling: %s scaling, %s (L%lld C%lld V%lld, %.0f parameters), %lld sequences %s x seq %lld, "
      "%d timed steps after %d warmup, %d repeat(s), %d thread(s) per rank, %d cores%s\n",
      o.mode.c_str(), name.c_str(), (long long)c0.model.n_layer, (long long)c0.model.d_model,
      (long long)c0.model.vocab_size, psi, (long long)o.batch,
      weak(o) ? (o.tp > 1 ? "per tp group" : "per rank") : "global", (long long)o.seq, o.steps, o.warmup, o.repeats,
      o.threads, cores, o.tp > 1 ? (", tp " + std::to_string(o.tp) + " (ranks are tp x dp)").c_str() : "");
  std::fflush(stdout);

  // The machine of the model.
  estimate::Cluster cluster;
  Calibration cal;
  const WorkerLauncher zero_launcher("zero");
  if (o.interconnect == "config") {
    cluster = c0.cluster;
    cal.flops_source = "config cluster.flops_per_rank";
    cal.link_source = "config cluster.intra_node / inter_node";
  } else {
    cluster.ranks_per_node = ranks.back();
    cluster.cores_per_node = cores;
    // MPI between CPU ranks has no progress thread: a collective moves only while its rank
    // waits on it, so overlap_comm hides nothing here.
    cluster.background_progress = false;
    calibrate_link(o, c0, cores, cal);
    if (!cal.links.empty()) cluster.intra_node = cal.links.rbegin()->second;  // reported as the cluster's
  }
  if (o.flops > 0) {
    cluster.flops_per_rank = o.flops;
    cal.flops_source = "--flops";
  }
  const bool measure_flops = o.interconnect == "calibrate" && o.flops <= 0;
  TRIAD_CHECK(o.interconnect == "calibrate" || cluster.flops_per_rank > 0,
              "triad-bench scaling --interconnect config: the config has no cluster.flops_per_rank; set it or give "
              "--flops");

  // The sweep: each repeat first calibrates the compute rate (1 rank, stage 0, at each
  // batch per rank of the sweep: one in weak scaling, one per rank count in strong), then
  // runs every point.
  auto calibration_key = [&](int n) {
    const int fill = std::max(1, cores / (o.threads * o.tp));  // ranks (tp groups) that keep every core busy
    const int d = data_parallel(o, n);
    return std::make_pair(global_batch(o, n) / d, std::min(d, fill));
  };
  std::vector<std::pair<int64_t, int>> calibrations;
  for (int n : ranks) calibrations.push_back(calibration_key(n));
  std::sort(calibrations.begin(), calibrations.end());
  calibrations.erase(std::unique(calibrations.begin(), calibrations.end()), calibrations.end());
  std::map<std::pair<int, int>, Point> points;
  for (int r = 0; r < o.repeats; ++r) {
    for (const auto& [b, k] : measure_flops ? calibrations : decltype(calibrations){}) {
      const double ms = slowest_of_concurrent_runs(zero_launcher, k, o.tp, zero_worker_args(o, 0, b));
      cal.compute_ms[{b, k}].push_back(ms);
      std::printf(
          "calibration %d/%d: %d concurrent %d-rank run(s), stage 0, %lld sequences: %.2f ms/step, %.2f GFLOP/s\n",
          r + 1, o.repeats, k, o.tp, (long long)b, ms, compute_rate(o, c0, b, ms) / 1e9);
      std::fflush(stdout);
    }
    for (int n : ranks)
      for (int s : o.stages) {
        Point& p = points[{n, s}];
        p.ranks = n, p.stage = s;
        nlohmann::json row =
            zero_launcher.run(n, zero_worker_args(o, s, global_batch(o, n)),
                              "ranks " + std::to_string(n) + ", stage " + std::to_string(s), "step_ms_median");
        std::printf("  run %d/%d: ranks %d, stage %d: %.2f ms/step\n", r + 1, o.repeats, n, s,
                    row["step_ms_median"].get<double>());
        std::fflush(stdout);
        p.runs.push_back(std::move(row));
      }
  }
  if (measure_flops) {
    cal.flops_source = "measured (" + std::to_string(o.tp) + "-rank stage 0 runs, median over repeats):";
    for (const auto& [key, ms] : cal.compute_ms) {
      cal.flops[key] = compute_rate(o, c0, key.first, app::median(ms));
      cal.flops_source += " " + std::to_string(key.first) + " seq x " + std::to_string(key.second) + " at once " +
                          csv_number(cal.flops[key] / 1e9) + " GFLOP/s;";
    }
    cal.flops_source.pop_back();
    cluster.flops_per_rank = cal.flops.at(calibration_key(ranks.front()));  // reported as the cluster's
  }

  // Medians, predictions, efficiencies.
  for (auto& [key, p] : points) {
    std::vector<double> ms;
    for (const nlohmann::json& r : p.runs) ms.push_back(r["step_ms_median"].get<double>());
    p.ms = app::median(ms);
    estimate::Cluster machine = cluster;
    if (measure_flops) machine.flops_per_rank = cal.flops.at(calibration_key(p.ranks));
    if (cal.links.count(p.ranks)) machine.intra_node = cal.links.at(p.ranks);
    p.predicted = estimate::estimate_step_time(model_input(o, configs.at(key), p.stage, p.ranks), machine);
    p.flops = machine.flops_per_rank;
  }
  auto efficiency = [&](int n, double t, double t0) {
    return weak(o) ? t0 / t : double(ranks.front()) * t0 / (double(n) * t);
  };

  std::printf("\nlink: %s; compute per rank: %s\n",
              cal.links.empty() ? (csv_number(cluster.intra_node.latency * 1e6) + " us, " +
                                   csv_number(cluster.intra_node.bandwidth / 1e9) + " GB/s (" + cal.link_source + ")")
                                      .c_str()
                                : cal.link_source.c_str(),
              measure_flops
                  ? cal.flops_source.c_str()
                  : (csv_number(cluster.flops_per_rank / 1e9) + " GFLOP/s (" + cal.flops_source + ")").c_str());
  std::printf(
      "ms/step: median over steps of the slowest rank (median of %d runs); eff: %s against %d rank(s); pred: the "
      "model (compute + exposed communication); err = (pred - meas) / meas\n",
      o.repeats, weak(o) ? "t1/tN" : "t1/(N tN)", ranks.front());
  std::printf("%5s %5s %7s %9s %9s %7s %10s %6s %6s %9s %9s %9s\n", "stage", "ranks", "batch", "ms/step", "pred ms",
              "err", "tokens/s", "eff", "p.eff", "bus MB", "tp bus MB", "state MB");
  const std::string csv_path = (std::filesystem::path(o.out) / "scaling.csv").string();
  std::ofstream csv(csv_path);
  TRIAD_CHECK(csv.good(), "triad-bench scaling: cannot write " << csv_path);
  csv << "mode,stage,ranks,global_batch,batch_per_rank,seq,ms_per_step,tokens_per_s,efficiency,bus_bytes,"
         "param_bytes,grad_bytes,optim_bytes,state_bytes,pred_ms_per_step,pred_compute_ms,pred_exposed_comm_ms,"
         "pred_bus_bytes,pred_tokens_per_s,pred_efficiency,pred_error,pred_gflops_per_rank,tp,tp_bus_bytes\n";
  nlohmann::json rows = nlohmann::json::array();
  double worst = 0;
  for (int s : o.stages) {  // stage-major: each stage's points are one line of the plot
    const Point& base = points.at({ranks.front(), s});
    for (int n : ranks) {
      const Point& p = points.at({n, s});
      const int64_t batch = global_batch(o, n);
      const double tps = double(batch * o.seq) / (p.ms / 1e3);
      const double pred_ms = p.predicted.step_s * 1e3;
      const double pred_tps = double(batch * o.seq) / p.predicted.step_s;
      const double eff = efficiency(n, p.ms, base.ms);
      const double pred_eff = efficiency(n, pred_ms, base.predicted.step_s * 1e3);
      const double err = (pred_ms - p.ms) / p.ms;
      worst = std::max(worst, std::fabs(err));
      nlohmann::json row = point_row(o, p);
      const nlohmann::json& mem = row["mem"];
      const double pb = mem["param_bytes"].get<double>(), gb = mem["grad_bytes"].get<double>(),
                   ob = mem["optim_bytes"].get<double>();
      const double bus = row["bus_bytes"].get<double>();
      std::printf("%5d %5d %7lld %9.2f %9.2f %+6.1f%% %10.0f %6.2f %6.2f %9.3f %9.3f %9.3f\n", s, n, (long long)batch,
                  p.ms, pred_ms, 100 * err, tps, eff, pred_eff, bus / kMB, row.value("tp_bus_bytes", 0.0) / kMB,
                  (pb + gb + ob) / kMB);
      csv << o.mode << ',' << s << ',' << n << ',' << batch << ',' << batch / data_parallel(o, n) << ',' << o.seq << ','
          << csv_number(p.ms) << ',' << csv_number(tps) << ',' << csv_number(eff) << ',' << csv_number(bus) << ','
          << csv_number(pb) << ',' << csv_number(gb) << ',' << csv_number(ob) << ',' << csv_number(pb + gb + ob) << ','
          << csv_number(pred_ms) << ',' << csv_number(p.predicted.compute_s * 1e3) << ','
          << csv_number(p.predicted.exposed_comm_s * 1e3) << ',' << csv_number(p.predicted.bus_bytes) << ','
          << csv_number(pred_tps) << ',' << csv_number(pred_eff) << ',' << csv_number(err) << ','
          << csv_number(p.flops / 1e9) << ',' << o.tp << ',' << csv_number(row.value("tp_bus_bytes", 0.0)) << '\n';
      row["mode"] = o.mode;
      row["global_batch"] = batch;
      row["efficiency"] = eff;
      row["state_bytes"] = pb + gb + ob;
      row["predicted"] = {{"step_ms", pred_ms},
                          {"compute_ms", p.predicted.compute_s * 1e3},
                          {"comm_ms", p.predicted.comm_s * 1e3},
                          {"exposed_comm_ms", p.predicted.exposed_comm_s * 1e3},
                          {"oversubscription", p.predicted.oversubscription},
                          {"flops_per_rank", p.flops},
                          {"bus_bytes", p.predicted.bus_bytes},
                          {"tokens_per_s", pred_tps},
                          {"efficiency", pred_eff},
                          {"error", err}};
      rows.push_back(std::move(row));
    }
  }
  csv.close();
  TRIAD_CHECK(!csv.fail(), "triad-bench scaling: writing " << csv_path << " failed");
  std::printf("largest |pred - meas| / meas: %.1f%%\n", 100 * worst);

  char title[256];
  std::snprintf(title, sizeof title, "triad-bench scaling: %s, %s (%.3gM params), %lld seq %s x %lld tokens",
                o.mode.c_str(), std::filesystem::path(name).filename().c_str(), psi / 1e6, (long long)o.batch,
                weak(o) ? "per rank" : "global", (long long)o.seq);
  const std::string gp_path = (std::filesystem::path(o.out) / "scaling.gp").string();
  write_gnuplot(gp_path, o, title);
  const int plotted = run_program({"gnuplot", "scaling.gp"}, o.out, false);
  TRIAD_CHECK(plotted == 0, "triad-bench scaling: gnuplot " << gp_path << " failed (status " << plotted << ")");
  const std::string png_path = (std::filesystem::path(o.out) / "scaling.png").string();
  std::printf("wrote %s, %s, %s\n", csv_path.c_str(), gp_path.c_str(), png_path.c_str());

  nlohmann::json compute = nlohmann::json::array();
  for (const auto& [key, ms] : cal.compute_ms)
    compute.push_back({{"batch_per_rank", key.first},
                       {"concurrent_runs", key.second},
                       {"step_ms", ms},
                       {"flops_per_rank", cal.flops.at(key)}});
  nlohmann::json links = nlohmann::json::array();
  for (const auto& [n, link] : cal.links)
    links.push_back({{"ranks", n}, {"latency_us", link.latency * 1e6}, {"bandwidth_GBps", link.bandwidth / 1e9}});
  nlohmann::json samples = nlohmann::json::array();
  for (const estimate::CollectiveSample& s : cal.samples)
    samples.push_back({{"op", estimate::collective_name(s.op)},
                       {"ranks", s.ranks},
                       {"bytes", s.bytes},
                       {"us", s.seconds * 1e6},
                       {"oversubscription", s.oversubscription}});
  app::print_json_line({{"bench", "scaling"},
                        {"mode", o.mode},
                        {"model", name},
                        {"params", int64_t(psi)},
                        {"batch", o.batch},
                        {"batch_is", weak(o) ? "per rank" : "global"},
                        {"seq", o.seq},
                        {"steps", o.steps},
                        {"warmup", o.warmup},
                        {"repeats", o.repeats},
                        {"threads_per_rank", o.threads},
                        {"cores", cores},
                        {"ranks", ranks},
                        {"tp", o.tp},
                        {"stages", o.stages},
                        {"interconnect", o.interconnect},
                        {"cluster",
                         {{"ranks_per_node", cluster.ranks_per_node},
                          {"cores_per_node", cluster.cores_per_node},
                          {"flops_per_rank", cluster.flops_per_rank},
                          {"background_progress", cluster.background_progress},
                          {"intra_node_latency_us", cluster.intra_node.latency * 1e6},
                          {"intra_node_bandwidth_GBps", cluster.intra_node.bandwidth / 1e9},
                          {"inter_node_latency_us", cluster.inter_node.latency * 1e6},
                          {"inter_node_bandwidth_GBps", cluster.inter_node.bandwidth / 1e9}}},
                        {"calibration",
                         {{"flops_source", cal.flops_source},
                          {"compute", compute},
                          {"link_source", cal.link_source},
                          {"links", links},
                          {"samples", samples}}},
                        {"max_abs_pred_error", worst},
                        {"csv", csv_path},
                        {"png", png_path},
                        {"rows", rows}});
  return 0;
}

}  // namespace

int run_scaling_bench(const ScalingOptions& o) { return o.worker ? run_worker(o) : run_parent(o); }

}  // namespace triad::bench
