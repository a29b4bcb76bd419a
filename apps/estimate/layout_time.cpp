#include "estimate/layout_time.h"

#include <algorithm>
#include <cstdio>

#include "estimate/pipeline_time.h"
#include "tensor/error.h"

namespace triad::estimate {

namespace {

// Megatron's tp collectives of one micro-batch on a stage (layout_time.h), in seconds.
std::pair<double, double> tp_seconds(const StageMemory& st, const LayoutMemory& mem, const Cluster& c) {
  const int tp = mem.layout.tp;
  if (tp == 1) return {0, 0};
  const double BT = double(mem.shape.batch) * double(mem.seq), S = 4 * BT * double(mem.shape.d_model);
  const auto time = [&](Collective op, double bytes) { return collective_time(op, bytes, tp, c); };
  const double pair = time(Collective::all_gather, S) + time(Collective::reduce_scatter, S);
  const double all_reduce = time(Collective::all_reduce, S);
  const bool sp = mem.shape.sequence_parallel;
  const double per_block = 2 * (sp ? pair : all_reduce);
  const double loss = time(Collective::all_reduce, 4 * BT) + time(Collective::all_reduce, 8 * BT);
  double forward = st.blocks * per_block, backward = st.blocks * per_block;
  if (st.embedding) forward += sp ? time(Collective::reduce_scatter, S) : all_reduce;
  if (st.head) {
    forward += loss + (sp ? time(Collective::all_gather, S) : 0.0);
    backward += sp ? time(Collective::reduce_scatter, S) : all_reduce;
  }
  return {forward, backward};
}

}  // namespace

LayoutTime compute_layout_time(const TimeOptions& o, const TimeModel& model, const LayoutMemory& mem) {
  LayoutTime t;
  t.cluster = resolve_cluster(o, model, t.flops_source);
  t.dtype = !o.dtype.empty() ? dtype_from_name(o.dtype) : model.dtype;
  t.overlap_comm = model.overlap_comm && !o.no_overlap && t.cluster.background_progress;
  const LayoutRequest& l = mem.layout;
  const int64_t world = int64_t(l.pp) * l.tp * l.dp, m = l.micro_batches;
  // The dp group's share of a node: ranks tp apart.
  Cluster dp_cluster = t.cluster;
  dp_cluster.ranks_per_node = std::max<int64_t>(1, t.cluster.ranks_per_node / l.tp);
  dp_cluster.cores_per_node = t.cluster.cores_per_node / l.tp;
  const double tokens_micro = double(l.micro_batch) * double(mem.seq);
  for (const StageMemory& st : mem.stages) {
    LayoutTime::Stage s;
    s.rank = st.rank;
    StepModelInput in;
    in.stage = l.zero_stage;
    in.ranks = l.dp;
    in.num_params = st.params;
    in.persistent_params = l.zero_stage == 3 ? double(st.persistent.elements) : 0.0;
    in.element_bytes = double(element_size(t.dtype));
    in.flops_per_token = st.flops_per_token;
    in.tokens_per_rank = tokens_micro * double(m);
    in.micro_batches = m;
    in.groups = 2 * (st.blocks + 1);  // a decay and a no-decay group per block and the root
    in.overlap_comm = t.overlap_comm;
    s.dp = estimate_step_time(in, dp_cluster);
    s.compute_s = s.dp.compute_s / double(m);
    s.exposed_dp_s = s.dp.step_s - s.dp.compute_s;
    std::tie(s.tp_forward_s, s.tp_backward_s) = tp_seconds(st, mem, t.cluster);
    t.forward_s = std::max(t.forward_s, s.compute_s / 3 + s.tp_forward_s);
    t.backward_s = std::max(t.backward_s, 2 * s.compute_s / 3 + s.tp_backward_s);
    t.exposed_dp_s = std::max(t.exposed_dp_s, s.exposed_dp_s);
    t.stages.push_back(s);
  }
  const int p = l.pp, v = p > 1 ? l.virtual_stages : 1;
  t.p2p_inter_node = world > t.cluster.ranks_per_node;
  const Link& link = t.p2p_inter_node ? t.cluster.inter_node : t.cluster.intra_node;
  if (p > 1) {
    t.p2p_bytes = mem.residual;
    t.p2p_s = link.latency + t.p2p_bytes / link.bandwidth;
    // The token table's gradient summed between the first and last stage: a 2-rank ring.
    Cluster pair = t.cluster;
    if (t.p2p_inter_node) pair.ranks_per_node = 1;
    const double table = double(mem.shape.vocab_rows) * double(mem.shape.d_model) * double(element_size(t.dtype));
    t.tied_s = collective_time(Collective::all_reduce, table, 2, pair);
  }
  const double I = t.backward_s / 2, W = t.backward_s / 2;
  const PipeCosts costs{.forward = t.forward_s / v, .backward_input = I / v, .backward_weight = W / v, .p2p = t.p2p_s};
  t.ideal_s = double(m) * (t.forward_s + t.backward_s);
  t.bubble = p > 1 ? theoretical_bubble(mem.schedule, p, int(m), v, costs) : 0.0;
  t.pipeline_s = p > 1 ? simulate_pipeline(mem.schedule, p, int(m), v, costs).makespan : t.ideal_s;
  t.step_s = t.pipeline_s + t.exposed_dp_s + t.tied_s;
  t.tokens_per_step = double(l.dp) * tokens_micro * double(m);
  t.tokens_per_s = t.tokens_per_step / t.step_s;
  return t;
}

nlohmann::json print_layout_time(const LayoutTime& t) {
  const Cluster& c = t.cluster;
  std::printf("\nstep time of the layout (estimate/layout_time.h; estimate/perf_model.h, Note [Step time model])\n");
  std::printf(
      "  compute %.4g TFLOP/s per rank (%s); %s parameters and gradients; %lld ranks per node; intra-node "
      "%.4g GB/s, %.3g us; inter-node %.4g Gb/s, %.3g us\n",
      c.flops_per_rank / 1e12, t.flops_source.c_str(), dtype_name(t.dtype), (long long)c.ranks_per_node,
      c.intra_node.bandwidth / 1e9, c.intra_node.latency * 1e6, c.inter_node.bandwidth * 8 / 1e9,
      c.inter_node.latency * 1e6);
  std::printf("%5s %16s %12s %12s %14s %11s\n", "stage", "compute ms/mb", "tp fwd ms", "tp bwd ms", "dp exposed ms",
              "dp bus GB");
  nlohmann::json stages = nlohmann::json::array();
  for (const LayoutTime::Stage& s : t.stages) {
    std::printf("%5d %16.3f %12.3f %12.3f %14.3f %11.4f\n", s.rank, s.compute_s * 1e3, s.tp_forward_s * 1e3,
                s.tp_backward_s * 1e3, s.exposed_dp_s * 1e3, s.dp.bus_bytes / 1e9);
    stages.push_back({{"stage", s.rank},
                      {"compute_ms_per_micro_batch", s.compute_s * 1e3},
                      {"tp_forward_ms", s.tp_forward_s * 1e3},
                      {"tp_backward_ms", s.tp_backward_s * 1e3},
                      {"dp_exposed_ms", s.exposed_dp_s * 1e3},
                      {"dp_bus_bytes", s.dp.bus_bytes}});
  }
  std::printf(
      "  per micro-batch on the slowest stage: forward %.3f ms, backward %.3f ms; p2p %.4g MB in %.3f ms "
      "(%s)\n",
      t.forward_s * 1e3, t.backward_s * 1e3, t.p2p_bytes / 1e6, t.p2p_s * 1e3,
      t.p2p_inter_node ? "inter-node" : "intra-node");
  std::printf(
      "  pipeline %.3f ms (ideal m(F+B) %.3f ms, closed-form bubble %.4f); + dp exposed %.3f ms + tied "
      "embedding all-reduce %.3f ms\n",
      t.pipeline_s * 1e3, t.ideal_s * 1e3, t.bubble, t.exposed_dp_s * 1e3, t.tied_s * 1e3);
  std::printf("  step %.3f ms, %.4g tokens/s\n", t.step_s * 1e3, t.tokens_per_s);
  return {{"flops_per_rank", c.flops_per_rank}, {"flops_source", t.flops_source},
          {"dtype", dtype_name(t.dtype)},       {"overlap_comm", t.overlap_comm},
          {"forward_ms", t.forward_s * 1e3},    {"backward_ms", t.backward_s * 1e3},
          {"p2p_bytes", t.p2p_bytes},           {"p2p_ms", t.p2p_s * 1e3},
          {"p2p_inter_node", t.p2p_inter_node}, {"tied_allreduce_ms", t.tied_s * 1e3},
          {"ideal_ms", t.ideal_s * 1e3},        {"bubble", t.bubble},
          {"pipeline_ms", t.pipeline_s * 1e3},  {"dp_exposed_ms", t.exposed_dp_s * 1e3},
          {"step_ms", t.step_s * 1e3},          {"tokens_per_step", t.tokens_per_step},
          {"tokens_per_s", t.tokens_per_s},     {"stages", stages}};
}

}  // namespace triad::estimate
