#include "bench/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "bench/workers.h"
#include "common/report.h"
#include "config/config.h"
#include "engine/engine.h"
#include "estimate/pipeline_time.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/runtime.h"
#include "triad.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

int chunks_of(const PipelineOptions& o, const std::string& schedule) {
  return schedule == "interleaved" ? o.virtual_stages : 1;
}

// The training config of one run: p stages, one rank each, m micro-batches of
// --micro-batch sequences per step.
engine::TrainConfig make_config(const PipelineOptions& o, int p, const std::string& schedule, int m) {
  nlohmann::json json = o.config.empty() ? preset_config_json(o.model) : engine::load_config_file(o.config);
  for (const std::string& s : o.overrides) engine::apply_override(json, s);
  json.erase("train_batch_size");
  json["train_micro_batch_size_per_gpu"] = o.micro_batch;
  json["gradient_accumulation_steps"] = m;
  json["steps"] = std::max<int64_t>(json.value("steps", int64_t(0)), int64_t(o.warmup + o.steps));
  json["zero_optimization"] = {{"stage", 0}};
  json["pipeline"] = {{"stages", p},
                      {"schedule", schedule},
                      {"virtual_stages", chunks_of(o, schedule)},
                      {"partition", o.partition}};
  engine::TrainConfig c = engine::parse_config(json, p);
  require_gpt2(c, o.config);
  TRIAD_CHECK(o.seq <= c.model.seq_len, "--seq " << o.seq << " exceeds the model's seq_len " << c.model.seq_len);
  return c;
}

// ---------------------------------------------------------------------------------------
// Worker: one (p, schedule, m) run under mpirun.

void check_ranks_agree(parallel::Communicator& world, const PipelineOptions& o) {
  std::ostringstream s;
  s << o.model << '|' << o.config << '|' << o.micro_batch << '|' << o.seq << '|' << o.steps << '|' << o.warmup << '|'
    << o.schedule << '|' << o.micro_batches << '|' << o.virtual_stages << '|' << o.partition;
  for (const std::string& x : o.overrides) s << '|' << x;
  bench::check_ranks_agree(world, s.str(), "pipeline");
}

// What one stage did in one step, from the executor's timings (seconds).
struct StageStep {
  double computed = 0, waited = 0, span = 0;
  // Summed durations and counts per kind of action (F, B, I, W), for the closed form's costs.
  double cost[4] = {0, 0, 0, 0};
  int count[4] = {0, 0, 0, 0};
};

StageStep stage_step(const std::vector<parallel::ActionTiming>& timings) {
  StageStep s;
  for (const parallel::ActionTiming& t : timings) {
    const double busy = t.end - t.start - t.waited;
    s.computed += busy, s.waited += t.waited, s.span = std::max(s.span, t.end);
    s.cost[int(t.action.op)] += busy, ++s.count[int(t.action.op)];
  }
  return s;
}

int run_worker(const PipelineOptions& o) {
  TRIAD_CHECK(parallel::launched_by_mpirun(),
              "triad-bench pipeline --worker runs under mpirun; run `triad-bench pipeline` without --worker instead");
  int argc = 0;
  char** argv = nullptr;
  const parallel::CommunicatorPtr world = parallel::init(argc, argv);
  const int p = world->size(), rank = world->rank();
  app::set_threads(parallel::threads_per_rank(0));
  check_ranks_agree(*world, o);
  const engine::TrainConfig config = make_config(o, p, o.schedule, o.micro_batches);
  engine::Engine engine(config, engine::process_grid(config, world));
  const int m = o.micro_batches;

  // Random tokens, the same on every rank: micro-batch k is rows [k·b, (k + 1)·b).
  const Tensor all = random_token_ids(o.micro_batch * m, o.seq + 1, config.model.vocab_size, 7);
  std::vector<Tensor> inputs, targets;
  for (int k = 0; k < m; ++k) {
    const Tensor rows = ops::narrow(all, 0, k * o.micro_batch, o.micro_batch);
    inputs.push_back(ops::contiguous(ops::narrow(rows, 1, 0, o.seq)));
    targets.push_back(ops::contiguous(ops::narrow(rows, 1, 1, o.seq)));
  }

  Allocator& memory = cpu_allocator();
  const int total = o.warmup + o.steps;
  std::vector<double> step_ms, pipe_ms, bubble, computed_ms, waited_ms;  // per timed step
  double activation_peak = 0, cost[4] = {0, 0, 0, 0}, count[4] = {0, 0, 0, 0};
  int peak_live = 0;
  double loss = 0;
  for (int s = 0; s < total; ++s) {
    world->barrier();  // the stages start the step together
    memory.reset_peak();
    const double base = double(memory.bytes_in_use());
    const auto t0 = Clock::now();
    if (engine.pipelined()) {
      loss = ops::mean(engine.forward_backward(inputs, targets)).item();
    } else {
      loss = 0;
      for (int k = 0; k < m; ++k) {
        const Tensor l = engine.forward(inputs[size_t(k)], targets[size_t(k)]);
        engine.backward(l);
        loss += l.item() / m;
      }
    }
    const double fb = app::ms_since(t0);
    const double act = double(memory.peak_bytes()) - base;
    engine.step();
    const double ms = app::ms_since(t0);
    TRIAD_CHECK(std::isfinite(loss), "triad-bench pipeline: loss " << loss << " at step " << s + 1);
    const StageStep st = engine.pipelined() ? stage_step(engine.pipeline()->timings()) : StageStep{};
    // The slowest rank's step and the longest pipeline phase; every stage's computed time.
    std::vector<double> v(size_t(3 + p), 0.0);
    v[0] = ms, v[1] = engine.pipelined() ? st.span * 1e3 : fb, v[2] = st.waited * 1e3;
    v[size_t(3 + rank)] = engine.pipelined() ? st.computed * 1e3 : fb;
    const std::vector<double> mx = max_over_ranks(*world, v);
    if (s < o.warmup) continue;
    step_ms.push_back(mx[0]), pipe_ms.push_back(mx[1]), waited_ms.push_back(mx[2]);
    double idle = 0, busy = 0;
    for (int r = 0; r < p; ++r) idle += 1 - mx[size_t(3 + r)] / mx[1], busy += mx[size_t(3 + r)];
    bubble.push_back(idle / p), computed_ms.push_back(busy / p);
    activation_peak = std::max(activation_peak, act);
    for (int k = 0; k < 4; ++k) cost[k] += st.cost[k], count[k] += st.count[k];
    if (engine.pipelined()) peak_live = std::max(peak_live, engine.pipeline()->peak_live());
  }

  // Per stage: peak activation bytes, peak live micro-batches; the mean cost of each kind
  // of action over stages and steps (one chunk's, with interleaving).
  std::vector<double> v(size_t(2 * p + 8), 0.0);
  v[size_t(rank)] = activation_peak, v[size_t(p + rank)] = peak_live;
  std::vector<double> sums(8);
  for (int k = 0; k < 4; ++k) sums[size_t(k)] = cost[k], sums[size_t(4 + k)] = count[k];
  Tensor t = Tensor::from_vector(sums, {8});
  world->all_reduce(t)->wait();
  const std::vector<double> summed = t.to_vector<double>();
  const std::vector<double> mx = max_over_ranks(*world, v);
  if (rank != 0) return 0;

  auto mean_ms = [&](parallel::PipeOp op) {
    const int k = int(op);
    return summed[size_t(4 + k)] > 0 ? summed[size_t(k)] / summed[size_t(4 + k)] * 1e3 : 0.0;
  };
  const parallel::PipeSchedule schedule = parallel::parse_pipe_schedule(o.schedule);
  const double f = mean_ms(parallel::PipeOp::forward);
  estimate::PipeCosts costs{.forward = f, .backward_input = mean_ms(parallel::PipeOp::backward), .backward_weight = 0};
  if (schedule == parallel::PipeSchedule::zb_h1)
    costs.backward_input = mean_ms(parallel::PipeOp::backward_input),
    costs.backward_weight = mean_ms(parallel::PipeOp::backward_weight);
  const int v_chunks = chunks_of(o, o.schedule);
  nlohmann::json stage_rows = nlohmann::json::array();
  for (int r = 0; r < p; ++r)
    stage_rows.push_back({{"stage", r}, {"peak_activation_bytes", mx[size_t(r)]}, {"peak_live", int(mx[size_t(p + r)])}});
  nlohmann::json row = {{"stages", p},
                        {"schedule", o.schedule},
                        {"virtual_stages", v_chunks},
                        {"micro_batches", m},
                        {"step_ms_median", app::median(step_ms)},
                        {"pipe_ms_median", app::median(pipe_ms)},
                        {"computed_ms_median", app::median(computed_ms)},
                        {"waited_ms_median", app::median(waited_ms)},
                        {"step_ms", step_ms},
                        {"action_ms", {{"F", f}, {"B", mean_ms(parallel::PipeOp::backward)},
                                       {"I", mean_ms(parallel::PipeOp::backward_input)},
                                       {"W", mean_ms(parallel::PipeOp::backward_weight)}}},
                        {"per_stage", stage_rows},
                        {"final_loss", loss}};
  if (p > 1) {
    row["bubble"] = app::median(bubble);
    row["bubble_steps"] = bubble;
    row["bubble_theory"] = estimate::theoretical_bubble(schedule, p, m, v_chunks, costs);
  }
  app::print_json_line(row);
  return 0;
}

// ---------------------------------------------------------------------------------------
// Parent: launches the workers, reports, checks the targets, plots.

struct ScheduleRun {
  int p, m;
  std::string schedule;
};

std::vector<ScheduleRun> runs_of(const PipelineOptions& o) {
  std::vector<ScheduleRun> runs;
  for (int p : o.stages)
    for (const std::string& s : o.schedules) {
      if (p == 1 && s != o.schedules.front()) continue;  // one stage: every schedule is the plain step
      for (int f : o.micro_factors) runs.push_back({p, f * p, p == 1 ? "1f1b" : s});
    }
  return runs;
}

void write_gnuplot(const std::string& path, const PipelineOptions& o, const std::vector<int>& panels) {
  std::ofstream f(path);
  TRIAD_CHECK(f.good(), "triad-bench pipeline: cannot write " << path);
  std::string schedules;
  for (const std::string& s : o.schedules) schedules += (schedules.empty() ? "" : " ") + s;
  f << "# Draws pipeline.png from pipeline.csv (written by triad-bench pipeline): gnuplot pipeline.gp\n"
    << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
    << "  set terminal pngcairo size 1200,800 noenhanced font ',11'\n"
    << "} else {\n"
    << "  set terminal png size 1200,800 noenhanced\n"
    << "}\n"
    << "set output 'pipeline.png'\n"
    << "set datafile separator ','\n"
    << "schedules = '" << schedules << "'\n"
    << "set multiplot layout 1," << panels.size()
    << " title 'triad-bench pipeline: bubble fraction against micro-batches (solid: measured, dashed: closed "
       "form)'\n"
    << "set logscale x 2\n"
    << "set grid\n"
    << "set key top right opaque box\n"
    << "set xlabel 'micro-batches m'\n"
    << "set ylabel 'bubble (idle / step)'\n"
    << "set yrange [0:*]\n";
  for (int p : panels)
    f << "set title 'p = " << p << (p > int(std::thread::hardware_concurrency()) ? " (oversubscribed)" : "") << "'\n"
      << "plot for [i=1:words(schedules)] 'pipeline.csv' using 'micro_batches':(column('stages') == " << p
      << " && strcol('schedule') eq word(schedules, i) ? column('bubble') : NaN) with linespoints lc i lw 2 pt 7 "
         "title word(schedules, i), \\\n"
      << "     for [i=1:words(schedules)] 'pipeline.csv' using 'micro_batches':(column('stages') == " << p
      << " && strcol('schedule') eq word(schedules, i) ? column('bubble_theory') : NaN) with lines lc i dt 2 "
         "notitle\n";
  f << "unset multiplot\n";
  TRIAD_CHECK(f.good(), "triad-bench pipeline: writing " << path << " failed");
}

// The targets at p = 2 (pipeline.h); null where the sweep lacks the runs they compare.
nlohmann::json check_targets(const nlohmann::json& rows) {
  nlohmann::json one_f_one_b = nlohmann::json::array();
  std::map<int, double> bubble_1f1b, bubble_zb;
  for (const nlohmann::json& r : rows) {
    if (r["stages"] != 2 || !r.contains("bubble")) continue;
    const int m = r["micro_batches"].get<int>();
    const double b = r["bubble"].get<double>();
    if (r["schedule"] == "1f1b") {
      const double formula = 1.0 / (m + 1);
      bubble_1f1b[m] = b;
      one_f_one_b.push_back({{"micro_batches", m},
                             {"bubble", b},
                             {"formula", formula},
                             {"difference", b - formula},
                             {"met", std::abs(b - formula) <= 0.05}});
    }
    if (r["schedule"] == "zb_h1") bubble_zb[m] = b;
  }
  nlohmann::json zb = nullptr;
  if (bubble_1f1b.count(4) && bubble_zb.count(4))
    zb = {{"micro_batches", 4},
          {"bubble_zb_h1", bubble_zb[4]},
          {"bubble_1f1b", bubble_1f1b[4]},
          {"ratio", bubble_zb[4] / bubble_1f1b[4]},
          {"met", bubble_zb[4] <= 0.5 * bubble_1f1b[4]}};
  return {{"1f1b_within_0.05_of_formula_at_p2", one_f_one_b}, {"zb_h1_at_most_half_of_1f1b_at_p2_m4", zb}};
}

int run_parent(const PipelineOptions& o) {
  TRIAD_CHECK(!parallel::launched_by_mpirun(),
              "triad-bench pipeline starts its own workers under mpirun; run it without mpirun");
  TRIAD_CHECK(!o.stages.empty() && !o.schedules.empty() && !o.micro_factors.empty(),
              "triad-bench pipeline: --stages, --schedules and --micro-factors need at least one value");
  for (const std::string& s : o.schedules) parallel::parse_pipe_schedule(s);  // names the bad one
  const std::vector<ScheduleRun> runs = runs_of(o);
  for (const ScheduleRun& r : runs) make_config(o, r.p, r.schedule, r.m);  // every run's config parses first
  if (!o.out.empty()) {
    TRIAD_CHECK(run_program({"gnuplot", "--version"}, "", true) == 0,
                "triad-bench pipeline: gnuplot is not on PATH; it draws pipeline.png (Debian: apt-get install "
                "gnuplot-nox)");
    std::filesystem::create_directories(o.out);
  }
  const WorkerLauncher launcher("pipeline");
  const engine::TrainConfig c0 = make_config(o, runs.front().p, runs.front().schedule, runs.front().m);
  const int cores = int(std::thread::hardware_concurrency());
  const std::string name = o.config.empty() ? o.model : o.config;
  std::printf(
      "triad-bench pipeline: %s (L%lld C%lld V%lld, %.2fM parameters), micro-batches of %lld x seq %lld, %s "
      "partition, interleaved v = %d, %d timed steps after %d warmup, %d cores\n",
      name.c_str(), (long long)c0.model.n_layer, (long long)c0.model.d_model, (long long)c0.model.vocab_size,
      double(c0.model.num_parameters()) / 1e6, (long long)o.micro_batch, (long long)o.seq, o.partition.c_str(),
      o.virtual_stages, o.steps, o.warmup, cores);
  std::printf(
      "bubble: mean over stages of 1 - (time computing) / (slowest stage's pipeline phase), median over steps; "
      "theory: the closed form with the measured action costs; act MB: the largest stage's peak activation bytes\n");
  std::printf("%3s %-12s %4s %9s %9s %8s %8s %8s %6s %8s\n", "p", "schedule", "m", "ms/step", "pipe ms", "bubble",
              "theory", "diff", "live", "act MB");
  std::fflush(stdout);

  nlohmann::json rows = nlohmann::json::array();
  std::ofstream csv;
  const std::string csv_path = (std::filesystem::path(o.out) / "pipeline.csv").string();
  if (!o.out.empty()) {
    csv.open(csv_path);
    TRIAD_CHECK(csv.good(), "triad-bench pipeline: cannot write " << csv_path);
    csv << "stages,schedule,micro_batches,step_ms,pipe_ms,bubble,bubble_theory,peak_live,peak_activation_bytes\n";
  }
  for (const ScheduleRun& r : runs) {
    std::vector<std::string> args = {
        "--model", o.model, "--schedule", r.schedule, "--micro-batches", std::to_string(r.m),
        "--virtual-stages", std::to_string(o.virtual_stages), "--partition", o.partition, "--micro-batch",
        std::to_string(o.micro_batch), "--seq", std::to_string(o.seq), "--steps", std::to_string(o.steps),
        "--warmup", std::to_string(o.warmup)};
    if (!o.config.empty()) args.insert(args.end(), {"--config", o.config});
    for (const std::string& s : o.overrides) args.insert(args.end(), {"--set", s});
    nlohmann::json row = launcher.run(
        r.p, args, "p " + std::to_string(r.p) + ", " + r.schedule + ", m " + std::to_string(r.m), "step_ms_median");
    double act = 0;
    int live = 0;
    for (const nlohmann::json& s : row["per_stage"])
      act = std::max(act, s["peak_activation_bytes"].get<double>()), live = std::max(live, s["peak_live"].get<int>());
    const bool piped = row.contains("bubble");
    const double b = piped ? row["bubble"].get<double>() : 0, th = piped ? row["bubble_theory"].get<double>() : 0;
    char bubble_text[3][16] = {"-", "-", "-"};
    if (piped) {
      std::snprintf(bubble_text[0], 16, "%.3f", b);
      std::snprintf(bubble_text[1], 16, "%.3f", th);
      std::snprintf(bubble_text[2], 16, "%+.3f", b - th);
    }
    std::printf("%3d %-12s %4d %9.1f %9.1f %8s %8s %8s %6d %8.2f\n", r.p, r.schedule.c_str(), r.m,
                row["step_ms_median"].get<double>(), row["pipe_ms_median"].get<double>(), bubble_text[0],
                bubble_text[1], bubble_text[2], live, act / 1e6);
    std::fflush(stdout);
    if (csv.is_open() && piped)
      csv << r.p << ',' << r.schedule << ',' << r.m << ',' << row["step_ms_median"].get<double>() << ','
          << row["pipe_ms_median"].get<double>() << ',' << b << ',' << th << ',' << live << ',' << act << '\n';
    rows.push_back(std::move(row));
  }
  const nlohmann::json targets = check_targets(rows);
  for (const nlohmann::json& t : targets["1f1b_within_0.05_of_formula_at_p2"])
    std::printf("target p=2 1F1B m=%d: bubble %.3f vs (p-1)/(m+p-1) = %.3f: %s\n", t["micro_batches"].get<int>(),
                t["bubble"].get<double>(), t["formula"].get<double>(), t["met"].get<bool>() ? "met" : "MISSED");
  if (const nlohmann::json& zb = targets["zb_h1_at_most_half_of_1f1b_at_p2_m4"]; !zb.is_null())
    std::printf("target p=2 m=4 ZB-H1 <= 1F1B / 2: %.3f vs %.3f (ratio %.2f): %s\n", zb["bubble_zb_h1"].get<double>(),
                zb["bubble_1f1b"].get<double>(), zb["ratio"].get<double>(), zb["met"].get<bool>() ? "met" : "MISSED");
  nlohmann::json files = nlohmann::json::object();
  if (csv.is_open()) {
    csv.close();
    TRIAD_CHECK(!csv.fail(), "triad-bench pipeline: writing " << csv_path << " failed");
    std::vector<int> panels;
    for (int p : o.stages)
      if (p > 1) panels.push_back(p);
    const std::string gp = (std::filesystem::path(o.out) / "pipeline.gp").string();
    const std::string png = (std::filesystem::path(o.out) / "pipeline.png").string();
    if (!panels.empty()) {
      write_gnuplot(gp, o, panels);
      const int plotted = run_program({"gnuplot", "pipeline.gp"}, o.out, false);
      TRIAD_CHECK(plotted == 0, "triad-bench pipeline: gnuplot " << gp << " failed (status " << plotted << ")");
      std::printf("wrote %s, %s, %s\n", csv_path.c_str(), gp.c_str(), png.c_str());
      files = {{"csv", csv_path}, {"gnuplot", gp}, {"png", png}};
    }
  }
  app::print_json_line({{"bench", "pipeline"},
                        {"model", name},
                        {"params", c0.model.num_parameters()},
                        {"micro_batch", o.micro_batch},
                        {"seq", o.seq},
                        {"steps", o.steps},
                        {"warmup", o.warmup},
                        {"cores", cores},
                        {"rows", rows},
                        {"targets", targets},
                        {"files", files}});
  return 0;
}

}  // namespace

int run_pipeline_bench(const PipelineOptions& o) { return o.worker ? run_worker(o) : run_parent(o); }

}  // namespace triad::bench
