#include "estimate/step_time.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "estimate/model_states.h"
#include "tensor/error.h"

namespace triad::estimate {

namespace {

// The achieved_gflops of the last JSON line of a `triad-bench step` output that has one.
double flops_from_step_json(const std::string& path) {
  std::ifstream in(path);
  TRIAD_CHECK(in.good(), "--step-json: cannot open '" << path << "'");
  double gflops = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("achieved_gflops") && j["achieved_gflops"].is_number())
      gflops = j["achieved_gflops"].get<double>();
  }
  TRIAD_CHECK(gflops > 0, "--step-json: '" << path
                                           << "' has no JSON line with a positive achieved_gflops (the last line of "
                                              "`triad-bench step`)");
  return gflops * 1e9;
}

}  // namespace

Cluster resolve_cluster(const TimeOptions& o, const TimeModel& m, std::string& flops_source) {
  Cluster c = m.cluster;
  if (o.ranks_per_node > 0) c.ranks_per_node = o.ranks_per_node;
  if (o.cores_per_node >= 0) c.cores_per_node = o.cores_per_node;
  if (o.intra_bandwidth_GBps > 0) c.intra_node.bandwidth = o.intra_bandwidth_GBps * 1e9;
  if (o.intra_latency_us >= 0) c.intra_node.latency = o.intra_latency_us * 1e-6;
  if (o.inter_bandwidth_Gbps > 0) c.inter_node.bandwidth = o.inter_bandwidth_Gbps * 1e9 / 8;
  if (o.inter_latency_us >= 0) c.inter_node.latency = o.inter_latency_us * 1e-6;
  flops_source = "cluster.flops_per_rank";
  if (!o.step_json.empty()) c.flops_per_rank = flops_from_step_json(o.step_json), flops_source = o.step_json;
  if (o.flops > 0) c.flops_per_rank = o.flops, flops_source = "--flops";
  TRIAD_CHECK(c.flops_per_rank > 0,
              "--time needs the compute rate of one rank: --flops F (FLOP/s), --step-json FILE (a `triad-bench step` "
              "output) or cluster.flops_per_rank in the config");
  return c;
}

void add_time_options(CLI::App& app, TimeOptions& o) {
  const std::string g = "Step time (--time)";
  app.add_flag("--time", o.enabled, "also predict the step time of each stage (alpha-beta model of the cluster)")
      ->group(g);
  app.add_option("--flops", o.flops, "achieved FLOP/s of one rank, e.g. 4e14")->group(g)->check(CLI::PositiveNumber);
  app.add_option("--step-json", o.step_json, "take the FLOP/s from a `triad-bench step` output (achieved_gflops)")
      ->group(g);
  app.add_option("--micro-batch", o.micro_batch,
                 "sequences per rank per micro-batch, also a layout's B (default: the config's "
                 "train_micro_batch_size_per_gpu, else train_batch_size / (micro-batches x dp), else 1)")
      ->group(g)
      ->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "tokens per sequence, also a layout's T (default: the config's model.seq_len)")
      ->group(g)
      ->check(CLI::PositiveNumber);
  app.add_option("--accumulation", o.accumulation, "micro-batches per step (gradient accumulation)")
      ->capture_default_str()
      ->group(g)
      ->check(CLI::PositiveNumber);
  app.add_option("--dtype", o.dtype, "parameter and gradient dtype: f32, bf16, f16 (default: the config's, else bf16)")
      ->group(g)
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_flag("--no-overlap", o.no_overlap,
               "communication never overlaps compute (default: the config's overlap_comm)")
      ->group(g);
  app.add_option("--ranks-per-node", o.ranks_per_node, "ranks on one node (cluster.ranks_per_node)")
      ->group(g)
      ->check(CLI::PositiveNumber);
  app.add_option("--cores-per-node", o.cores_per_node,
                 "compute units a node's ranks share; 0: one per rank (cluster.cores_per_node)")
      ->group(g)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--intra-bandwidth-GBps", o.intra_bandwidth_GBps, "intra-node bandwidth per rank, GB/s")
      ->group(g)
      ->check(CLI::PositiveNumber);
  app.add_option("--intra-latency-us", o.intra_latency_us, "intra-node latency per ring step, us")
      ->group(g)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--inter-bandwidth-Gbps", o.inter_bandwidth_Gbps, "inter-node bandwidth per rank, Gb/s (bits)")
      ->group(g)
      ->check(CLI::PositiveNumber);
  app.add_option("--inter-latency-us", o.inter_latency_us, "inter-node latency per ring step, us")
      ->group(g)
      ->check(CLI::NonNegativeNumber);
}

StepTimes compute_step_times(const TimeOptions& o, const TimeModel& m, const std::vector<int64_t>& dps) {
  StepTimes t;
  t.cluster = resolve_cluster(o, m, t.flops_source);
  t.seq = o.seq > 0 ? o.seq : m.seq_len;
  TRIAD_CHECK(t.seq > 0, "--time with --params needs --seq (tokens per sequence)");
  t.micro_batch = o.micro_batch > 0 ? o.micro_batch : m.micro_batch > 0 ? m.micro_batch : 1;
  t.accumulation = o.accumulation;
  t.dtype = !o.dtype.empty() ? dtype_from_name(o.dtype) : m.dtype;
  t.attention = m.n_layer > 0 && m.d_model > 0;
  // Overlap also needs communication that moves while ranks compute (cluster.background_progress).
  t.overlap_comm = m.overlap_comm && !o.no_overlap && t.cluster.background_progress;
  t.flops_per_token =
      6.0 * m.params + (t.attention ? 6.0 * double(m.n_layer) * double(m.d_model) * double(t.seq) : 0.0);
  t.tokens_per_rank = double(t.micro_batch * t.accumulation * t.seq);
  for (int64_t dp : dps)
    for (int stage = 0; stage < 4; ++stage) {
      StepModelInput in;
      in.stage = stage;
      in.ranks = dp;
      in.num_params = m.params;
      in.persistent_params = stage == 3 ? m.persistent_params : 0.0;
      in.element_bytes = double(element_size(t.dtype));
      in.flops_per_token = t.flops_per_token;
      in.tokens_per_rank = t.tokens_per_rank;
      in.micro_batches = t.accumulation;
      in.groups = t.attention ? 2 * (m.n_layer + 1) : 1;  // a decay and a no-decay group per block and the root
      in.overlap_comm = t.overlap_comm;
      t.rows.push_back({dp, stage, estimate_step_time(in, t.cluster)});
    }
  return t;
}

nlohmann::json print_step_times(const StepTimes& t) {
  const Cluster& c = t.cluster;
  std::printf("\nstep time per rank (estimate/perf_model.h, Note [Step time model])\n");
  std::printf(
      "  compute %.4g TFLOP/s per rank (%s); %lld sequences x %lld tokens per rank per micro-batch, %lld "
      "micro-batch(es); %.4g FLOPs per token (6N%s); %s parameters and gradients\n",
      c.flops_per_rank / 1e12, t.flops_source.c_str(), (long long)t.micro_batch, (long long)t.seq,
      (long long)t.accumulation, t.flops_per_token, t.attention ? " + 6LCT" : "; attention not counted",
      dtype_name(t.dtype));
  std::string cores;
  if (c.cores_per_node > 0) cores = ", " + std::to_string(c.cores_per_node) + " cores per node";
  std::printf(
      "  %lld ranks per node%s; intra-node %.4g GB/s, %.3g us; inter-node %.4g Gb/s, %.3g us; rings, "
      "hierarchical across nodes; %s\n",
      (long long)c.ranks_per_node, cores.c_str(), c.intra_node.bandwidth / 1e9, c.intra_node.latency * 1e6,
      c.inter_node.bandwidth * 8 / 1e9, c.inter_node.latency * 1e6,
      t.overlap_comm ? "overlappable phases cost max(compute, communication)" : "communication never overlaps compute");
  std::printf("%6s  %-12s %11s %11s %11s %11s %12s %10s\n", "dp", "stage", "compute ms", "comm ms", "exposed ms",
              "step ms", "tokens/s", "bus GB");
  nlohmann::json rows = nlohmann::json::array();
  for (const StepTimes::Row& r : t.rows) {
    const StepEstimate& e = r.estimate;
    const double tps = double(r.dp) * t.tokens_per_rank / e.step_s;
    std::printf("%6lld  %-12s %11.3f %11.3f %11.3f %11.3f %12.4g %10.4f\n", (long long)r.dp,
                (std::to_string(r.stage) + " " + stage_name(r.stage)).c_str(), e.compute_s * 1e3, e.comm_s * 1e3,
                e.exposed_comm_s * 1e3, e.step_s * 1e3, tps, e.bus_bytes / 1e9);
    rows.push_back({{"dp", r.dp},
                    {"stage", r.stage},
                    {"compute_ms", e.compute_s * 1e3},
                    {"comm_ms", e.comm_s * 1e3},
                    {"exposed_comm_ms", e.exposed_comm_s * 1e3},
                    {"step_ms", e.step_s * 1e3},
                    {"tokens_per_s", tps},
                    {"bus_bytes", e.bus_bytes}});
  }
  return {
      {"flops_per_rank", c.flops_per_rank},
      {"flops_source", t.flops_source},
      {"flops_per_token", t.flops_per_token},
      {"micro_batch", t.micro_batch},
      {"seq", t.seq},
      {"accumulation", t.accumulation},
      {"dtype", dtype_name(t.dtype)},
      {"overlap_comm", t.overlap_comm},
      {"cluster",
       {{"ranks_per_node", c.ranks_per_node},
        {"cores_per_node", c.cores_per_node},
        {"intra_node", {{"bandwidth_GBps", c.intra_node.bandwidth / 1e9}, {"latency_us", c.intra_node.latency * 1e6}}},
        {"inter_node",
         {{"bandwidth_Gbps", c.inter_node.bandwidth * 8 / 1e9}, {"latency_us", c.inter_node.latency * 1e6}}}}},
      {"rows", rows}};
}

}  // namespace triad::estimate
