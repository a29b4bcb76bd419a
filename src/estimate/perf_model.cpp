#include "estimate/perf_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/error.h"

namespace triad::estimate {

namespace {

bool positive(double x) { return std::isfinite(x) && x > 0; }
bool non_negative(double x) { return std::isfinite(x) && x >= 0; }

void validate(const Link& link, const char* which) {
  TRIAD_CHECK(link.bandwidth > 0 && !std::isnan(link.bandwidth),
              "[perf] " << which << " bandwidth must be positive, got " << link.bandwidth);
  TRIAD_CHECK(non_negative(link.latency), "[perf] " << which << " latency must be >= 0, got " << link.latency);
}

void validate(const Cluster& c) {
  TRIAD_CHECK(c.ranks_per_node >= 1, "[perf] ranks_per_node must be at least 1, got " << c.ranks_per_node);
  TRIAD_CHECK(c.cores_per_node >= 0, "[perf] cores_per_node must be >= 0, got " << c.cores_per_node);
  validate(c.intra_node, "intra_node");
  validate(c.inter_node, "inter_node");
}

// Steps and the bus fraction of one flat ring over p ranks: time = steps·α + fraction·S/β.
struct Ring {
  double steps, fraction;
};
Ring ring(Collective c, double p) {
  return c == Collective::all_reduce ? Ring{2 * (p - 1), 2 * (p - 1) / p} : Ring{p - 1, (p - 1) / p};
}

double ring_time(Collective c, double bytes, double p, const Link& link) {
  if (p <= 1) return 0.0;
  const Ring r = ring(c, p);
  return r.steps * link.latency + r.fraction * bytes / link.bandwidth;
}

// Ranks on one node and nodes, for `ranks` ranks filling nodes in order.
std::pair<int64_t, int64_t> placement(int64_t ranks, const Cluster& c) {
  if (ranks <= c.ranks_per_node) return {ranks, 1};
  TRIAD_CHECK(ranks % c.ranks_per_node == 0,
              "[perf] " << ranks << " ranks do not fill nodes of ranks_per_node " << c.ranks_per_node << " evenly");
  return {c.ranks_per_node, ranks / c.ranks_per_node};
}

double oversubscription(int64_t ranks, int64_t threads, const Cluster& c) {
  if (c.cores_per_node == 0) return 1.0;
  const double busy = double(std::min(ranks, c.ranks_per_node)) * double(threads);
  return std::max(1.0, busy / double(c.cores_per_node));
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
  }
  return "?";
}

double collective_time(Collective c, double bytes, int64_t ranks, const Cluster& cluster) {
  validate(cluster);
  TRIAD_CHECK(non_negative(bytes), "[perf] collective bytes must be >= 0, got " << bytes);
  TRIAD_CHECK(ranks >= 1, "[perf] ranks must be at least 1, got " << ranks);
  const auto [g, k] = placement(ranks, cluster);
  if (k == 1) return ring_time(c, bytes, double(g), cluster.intra_node);
  // Hierarchical: intra-node reduce-scatter, inter-node collective on the node's 1/g piece,
  // intra-node all-gather (reduce-scatter and all-gather: one half each).
  const double gd = double(g), kd = double(k);
  const double inter = ring_time(c, bytes / gd, kd, cluster.inter_node);
  switch (c) {
    case Collective::all_reduce:
      return ring_time(Collective::reduce_scatter, bytes, gd, cluster.intra_node) + inter +
             ring_time(Collective::all_gather, bytes, gd, cluster.intra_node);
    case Collective::reduce_scatter:
    case Collective::all_gather:
      return ring_time(c, bytes, gd, cluster.intra_node) + inter;
  }
  return 0.0;
}

double collective_bus_bytes(Collective c, double bytes, int64_t ranks) {
  TRIAD_CHECK(ranks >= 1, "[perf] ranks must be at least 1, got " << ranks);
  return ring(c, double(ranks)).fraction * bytes;
}

StepEstimate estimate_step_time(const StepModelInput& in, const Cluster& cluster) {
  validate(cluster);
  TRIAD_CHECK(in.stage >= 0 && in.stage <= 3, "[perf] ZeRO stage must be 0, 1, 2 or 3, got " << in.stage);
  TRIAD_CHECK(in.ranks >= 1, "[perf] ranks must be at least 1, got " << in.ranks);
  TRIAD_CHECK(positive(in.num_params), "[perf] the parameter count must be positive, got " << in.num_params);
  TRIAD_CHECK(non_negative(in.persistent_params) && in.persistent_params <= in.num_params,
              "[perf] persistent parameters must be in [0, " << in.num_params << "], got " << in.persistent_params);
  TRIAD_CHECK(positive(in.element_bytes), "[perf] element bytes must be positive, got " << in.element_bytes);
  TRIAD_CHECK(positive(in.flops_per_token), "[perf] FLOPs per token must be positive, got " << in.flops_per_token);
  TRIAD_CHECK(non_negative(in.tokens_per_rank), "[perf] tokens per rank must be >= 0, got " << in.tokens_per_rank);
  TRIAD_CHECK(in.micro_batches >= 1, "[perf] micro-batches must be at least 1, got " << in.micro_batches);
  TRIAD_CHECK(in.groups >= 1, "[perf] groups must be at least 1, got " << in.groups);
  TRIAD_CHECK(in.threads_per_rank >= 1, "[perf] threads per rank must be at least 1, got " << in.threads_per_rank);
  TRIAD_CHECK(positive(cluster.flops_per_rank),
              "[perf] the compute rate (flops_per_rank) must be positive, got " << cluster.flops_per_rank);

  StepEstimate e;
  e.oversubscription = oversubscription(in.ranks, in.threads_per_rank, cluster);
  e.compute_s = in.flops_per_token * in.tokens_per_rank / cluster.flops_per_rank * e.oversubscription;
  e.forward_compute_s = e.compute_s / 3;
  e.backward_compute_s = e.compute_s - e.forward_compute_s;

  const bool overlap = in.overlap_comm && cluster.background_progress;
  const double m = double(in.micro_batches), psi = in.num_params, kept = in.persistent_params;
  auto add = [&](std::string what, std::string when, Collective op, double elements, double times) {
    if (elements <= 0) return;
    CommPhase p;
    p.what = std::move(what), p.when = std::move(when), p.op = op;
    p.calls = int64_t(times) * in.groups;
    const double bytes_per_round = elements * in.element_bytes;
    p.bytes = bytes_per_round * times;
    // Each call pays the latency; the volume pays the bandwidth once.
    const double latency = collective_time(op, 0.0, in.ranks, cluster);
    p.seconds = (collective_time(op, bytes_per_round, in.ranks, cluster) - latency + latency * double(in.groups)) *
                times * e.oversubscription;
    p.bus_bytes = collective_bus_bytes(op, p.bytes, in.ranks);
    p.overlapped = overlap && when != "step";
    e.phases.push_back(std::move(p));
  };
  switch (in.stage) {
    case 0:
      add("gradient all-reduce", "backward", Collective::all_reduce, psi, 1);
      break;
    case 1:
      add("gradient reduce-scatter", "step", Collective::reduce_scatter, psi, 1);
      add("parameter all-gather", "step", Collective::all_gather, psi, 1);
      break;
    case 2:
      add("gradient reduce-scatter", "backward", Collective::reduce_scatter, psi, m);
      add("parameter all-gather", "step", Collective::all_gather, psi, 1);
      break;
    case 3:
      add("forward parameter all-gather", "forward", Collective::all_gather, psi - kept, m);
      add("backward parameter all-gather", "backward", Collective::all_gather, psi - kept, m);
      add("gradient reduce-scatter", "backward", Collective::reduce_scatter, psi - kept, m);
      add("persistent gradient reduce-scatter", "backward", Collective::reduce_scatter, kept, m);
      add("persistent parameter all-gather", "step", Collective::all_gather, kept, 1);
      break;
  }
  if (in.stage >= 1 && in.ranks > 1) {  // the clipping norm: one 8-byte all-reduce, latency only
    CommPhase p{"gradient norm all-reduce", "step", Collective::all_reduce, 8, 1, 0, 0, false};
    p.seconds = collective_time(Collective::all_reduce, 8, in.ranks, cluster) * e.oversubscription;
    p.bus_bytes = collective_bus_bytes(Collective::all_reduce, 8, in.ranks);
    e.phases.push_back(p);
  }

  for (const CommPhase& p : e.phases) {
    (p.when == "forward" ? e.forward_comm_s : p.when == "backward" ? e.backward_comm_s : e.step_comm_s) += p.seconds;
    e.bus_bytes += p.bus_bytes;
  }
  e.comm_s = e.forward_comm_s + e.backward_comm_s + e.step_comm_s;
  auto phase = [&](double compute, double comm) { return overlap ? std::max(compute, comm) : compute + comm; };
  e.forward_s = phase(e.forward_compute_s, e.forward_comm_s);
  e.backward_s = phase(e.backward_compute_s, e.backward_comm_s);
  e.step_s = e.forward_s + e.backward_s + e.step_comm_s;
  e.exposed_comm_s = e.step_s - e.compute_s;
  return e;
}

Link fit_link(const std::vector<CollectiveSample>& samples) {
  // Rows a·α + b·x ≈ t with x = 1/β, each divided by t: minimise Σ (a'α + b'x − 1)².
  double saa = 0, sab = 0, sbb = 0, sa = 0, sb = 0;
  int used = 0;
  for (const CollectiveSample& s : samples) {
    TRIAD_CHECK(positive(s.seconds) && non_negative(s.bytes) && s.ranks >= 1 && positive(s.oversubscription),
                "[perf] bad collective sample: " << collective_name(s.op) << " of " << s.bytes << " bytes on "
                                                 << s.ranks << " ranks in " << s.seconds << " s");
    if (s.ranks < 2) continue;
    const Ring r = ring(s.op, double(s.ranks));
    const double t = s.seconds / s.oversubscription;
    const double a = r.steps / t, b = r.fraction * s.bytes / t;
    saa += a * a, sab += a * b, sbb += b * b, sa += a, sb += b;
    ++used;
  }
  TRIAD_CHECK(used > 0, "[perf] fitting a link needs collective samples on at least 2 ranks");
  double alpha = 0, x = 0;
  const double det = saa * sbb - sab * sab;
  if (det > 0) {
    alpha = (sa * sbb - sb * sab) / det;
    x = (sb * saa - sa * sab) / det;
  }
  if (det <= 0 || alpha < 0 || x < 0) {  // one parameter alone: the better of the two fits
    const double only_x = sbb > 0 ? std::max(0.0, sb / sbb) : 0.0;
    const double only_alpha = saa > 0 ? std::max(0.0, sa / saa) : 0.0;
    const double err_x = used - 2 * only_x * sb + only_x * only_x * sbb;
    const double err_alpha = used - 2 * only_alpha * sa + only_alpha * only_alpha * saa;
    if (err_x <= err_alpha)
      alpha = 0, x = only_x;
    else
      alpha = only_alpha, x = 0;
  }
  return {x > 0 ? 1.0 / x : std::numeric_limits<double>::infinity(), alpha};
}

}  // namespace triad::estimate
