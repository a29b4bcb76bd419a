// The step-time model (estimate/perf_model.h) against closed-form values: ring costs of
// each collective on one node and hierarchically across nodes, each stage's phases, bus bytes
// and overlap, oversubscribed cores, per-call latency, and the alpha-beta fit recovering a
// link from timings it generated.
#include <boost/test/unit_test.hpp>

#include "estimate/perf_model.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_perf_model)

using namespace triad;
using estimate::Collective;

namespace {

namespace tt = boost::test_tools;

// 8 ranks per node; intra 100 GB/s, 2 µs; inter 25 GB/s (200 Gb/s), 10 µs; 1 TFLOP/s.
estimate::Cluster cluster() {
  estimate::Cluster c;
  c.ranks_per_node = 8;
  c.intra_node = {100e9, 2e-6};
  c.inter_node = {25e9, 10e-6};
  c.flops_per_rank = 1e12;
  return c;
}

// Ψ = 1e9 fp32 parameters, 1e4 tokens per rank, 6Ψ FLOPs per token: 60 s of compute at
// 1 TFLOP/s (20 forward, 40 backward).
estimate::StepModelInput input(int stage, int64_t ranks) {
  estimate::StepModelInput in;
  in.stage = stage;
  in.ranks = ranks;
  in.num_params = 1e9;
  in.element_bytes = 4;
  in.flops_per_token = 6e9;
  in.tokens_per_rank = 1e4;
  return in;
}

const estimate::CommPhase& phase(const estimate::StepEstimate& e, const std::string& what) {
  for (const estimate::CommPhase& p : e.phases)
    if (p.what == what) return p;
  BOOST_FAIL("no phase '" << what << "'");
  return e.phases.front();
}

}  // namespace

BOOST_AUTO_TEST_CASE(ring_costs_on_one_node) {
  const estimate::Cluster c = cluster();
  // 8 ranks, S = 1e9 B: all-reduce 2·7·2 µs + 2·7/8·1e9/1e11 s; the others half of it.
  BOOST_TEST(estimate::collective_time(Collective::all_reduce, 1e9, 8, c) == 28e-6 + 0.0175, tt::tolerance(1e-12));
  BOOST_TEST(estimate::collective_time(Collective::reduce_scatter, 1e9, 8, c) == 14e-6 + 0.00875, tt::tolerance(1e-12));
  BOOST_TEST(estimate::collective_time(Collective::all_gather, 1e9, 8, c) == 14e-6 + 0.00875, tt::tolerance(1e-12));
  // 2 ranks: one step each way.
  BOOST_TEST(estimate::collective_time(Collective::all_reduce, 1e9, 2, c) == 4e-6 + 0.01, tt::tolerance(1e-12));
  // Zero bytes: latency only. One rank: nothing moves.
  BOOST_TEST(estimate::collective_time(Collective::all_gather, 0, 4, c) == 6e-6, tt::tolerance(1e-12));
  for (Collective op : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather}) {
    BOOST_TEST(estimate::collective_time(op, 1e9, 1, c) == 0.0);
    BOOST_TEST(estimate::collective_bus_bytes(op, 1e9, 1) == 0.0);
  }
  // nccl-tests' bus bytes.
  BOOST_TEST(estimate::collective_bus_bytes(Collective::all_reduce, 1e9, 8) == 1.75e9, tt::tolerance(1e-12));
  BOOST_TEST(estimate::collective_bus_bytes(Collective::reduce_scatter, 1e9, 8) == 0.875e9, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(hierarchical_across_nodes) {
  const estimate::Cluster c = cluster();
  // 16 ranks = 8 per node x 2 nodes, S = 1e9 B. Intra reduce-scatter 7·2 µs + 7/8·1e9/1e11;
  // inter all-reduce of S/8 over 2 nodes 2·10 µs + 2·1/2·1.25e8/25e9; intra all-gather as the
  // reduce-scatter.
  const double intra = 14e-6 + 0.00875;
  BOOST_TEST(estimate::collective_time(Collective::all_reduce, 1e9, 16, c) == 2 * intra + 20e-6 + 0.005,
             tt::tolerance(1e-12));
  BOOST_TEST(estimate::collective_time(Collective::reduce_scatter, 1e9, 16, c) == intra + 10e-6 + 0.0025,
             tt::tolerance(1e-12));
  BOOST_TEST(estimate::collective_time(Collective::all_gather, 1e9, 16, c) == intra + 10e-6 + 0.0025,
             tt::tolerance(1e-12));
  // 64 ranks, 8 nodes: inter all-reduce 2·7·10 µs + 2·7/8·1.25e8/25e9.
  const double intra64 = 14e-6 + 0.00875;
  BOOST_TEST(estimate::collective_time(Collective::all_reduce, 1e9, 64, c) == 2 * intra64 + 140e-6 + 0.00875,
             tt::tolerance(1e-12));
  // Much cheaper than one flat ring at the inter-node bandwidth (2·15/16·1e9/25e9 = 75 ms).
  BOOST_TEST(estimate::collective_time(Collective::all_reduce, 1e9, 16, c) < 0.075);
  // Bus bytes do not depend on the topology.
  BOOST_TEST(estimate::collective_bus_bytes(Collective::all_reduce, 1e9, 16) == 1.875e9, tt::tolerance(1e-12));
  test::check_error([&] { estimate::collective_time(Collective::all_reduce, 1e9, 12, c); },
                    {"12 ranks", "ranks_per_node 8"});
}

BOOST_AUTO_TEST_CASE(compute_alone_on_one_rank) {
  for (int stage = 0; stage < 4; ++stage) {
    const estimate::StepEstimate e = estimate::estimate_step_time(input(stage, 1), cluster());
    BOOST_TEST(e.compute_s == 60.0, tt::tolerance(1e-12));
    BOOST_TEST(e.forward_compute_s == 20.0, tt::tolerance(1e-12));
    BOOST_TEST(e.backward_compute_s == 40.0, tt::tolerance(1e-12));
    BOOST_TEST(e.step_s == 60.0, tt::tolerance(1e-12));
    BOOST_TEST(e.comm_s == 0.0);
    BOOST_TEST(e.bus_bytes == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(stage_phases_and_bus_bytes) {
  const estimate::Cluster c = cluster();
  const double psi_bytes = 4e9, n = 8;
  const double ar = estimate::collective_time(Collective::all_reduce, psi_bytes, 8, c);
  const double half = estimate::collective_time(Collective::reduce_scatter, psi_bytes, 8, c);
  const double norm = estimate::collective_time(Collective::all_reduce, 8, 8, c);
  const double norm_bus = 8 * 2 * (n - 1) / n;

  const estimate::StepEstimate s0 = estimate::estimate_step_time(input(0, 8), c);
  BOOST_TEST(s0.phases.size() == 1u);
  BOOST_TEST(phase(s0, "gradient all-reduce").seconds == ar, tt::tolerance(1e-12));
  BOOST_TEST(phase(s0, "gradient all-reduce").when == "backward");
  BOOST_TEST(s0.bus_bytes == 2 * psi_bytes * (n - 1) / n, tt::tolerance(1e-12));
  // Overlapped: 70 ms of all-reduce hide under 40 s of backward.
  BOOST_TEST(s0.step_s == 60.0, tt::tolerance(1e-12));
  BOOST_TEST(s0.exposed_comm_s == 0.0, tt::tolerance(1e-9));

  const estimate::StepEstimate s1 = estimate::estimate_step_time(input(1, 8), c);
  BOOST_TEST(s1.step_comm_s == 2 * half + norm, tt::tolerance(1e-12));
  BOOST_TEST(s1.step_s == 60.0 + 2 * half + norm, tt::tolerance(1e-12));
  BOOST_TEST(s1.bus_bytes == 2 * psi_bytes * (n - 1) / n + norm_bus, tt::tolerance(1e-12));

  const estimate::StepEstimate s2 = estimate::estimate_step_time(input(2, 8), c);
  BOOST_TEST(s2.backward_comm_s == half, tt::tolerance(1e-12));
  BOOST_TEST(s2.step_comm_s == half + norm, tt::tolerance(1e-12));
  BOOST_TEST(s2.step_s == 60.0 + half + norm, tt::tolerance(1e-12));
  BOOST_TEST(s2.bus_bytes == s1.bus_bytes, tt::tolerance(1e-12));

  // Stage 3, a quarter of Ψ persistent: 3(Ψ−P) + 2P elements of bus traffic.
  estimate::StepModelInput in3 = input(3, 8);
  in3.persistent_params = 0.25e9;
  const estimate::StepEstimate s3 = estimate::estimate_step_time(in3, c);
  const double sharded = 3e9, kept = 1e9;  // bytes
  BOOST_TEST(s3.bus_bytes == (3 * sharded + 2 * kept) * (n - 1) / n + norm_bus, tt::tolerance(1e-12));
  BOOST_TEST(s3.forward_comm_s == estimate::collective_time(Collective::all_gather, sharded, 8, c),
             tt::tolerance(1e-12));
  BOOST_TEST(s3.backward_comm_s == 2 * estimate::collective_time(Collective::all_gather, sharded, 8, c) +
                                       estimate::collective_time(Collective::reduce_scatter, kept, 8, c),
             tt::tolerance(1e-12));
  BOOST_TEST(s3.step_comm_s == estimate::collective_time(Collective::all_gather, kept, 8, c) + norm,
             tt::tolerance(1e-12));
  // Nothing persistent: 3Ψ(n−1)/n, as ZeRO's paper has it.
  const estimate::StepEstimate s3all = estimate::estimate_step_time(input(3, 8), c);
  BOOST_TEST(s3all.bus_bytes == 3 * psi_bytes * (n - 1) / n + norm_bus, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(overlap_is_max_of_compute_and_comm) {
  // Little compute (60 ms: 20 forward, 40 backward), much communication: 1e9 fp32 over
  // 2 ranks of 1 GB/s, 1 µs.
  estimate::Cluster c = cluster();
  c.intra_node = {1e9, 1e-6};
  estimate::StepModelInput in = input(0, 2);
  in.tokens_per_rank = 10;
  const double ar = 2e-6 + 4.0;  // 2 steps of 1 µs + 2·(1/2)·4e9/1e9
  estimate::StepEstimate e = estimate::estimate_step_time(in, c);
  BOOST_TEST(e.step_s == 0.02 + std::max(0.04, ar), tt::tolerance(1e-12));
  BOOST_TEST(e.exposed_comm_s == ar - 0.04, tt::tolerance(1e-9));
  in.overlap_comm = false;
  e = estimate::estimate_step_time(in, c);
  BOOST_TEST(e.step_s == 0.06 + ar, tt::tolerance(1e-12));
  BOOST_TEST(e.exposed_comm_s == ar, tt::tolerance(1e-9));
  // Without background progress overlap_comm hides nothing.
  in.overlap_comm = true;
  c.background_progress = false;
  e = estimate::estimate_step_time(in, c);
  BOOST_TEST(e.step_s == 0.06 + ar, tt::tolerance(1e-12));
  for (const estimate::CommPhase& p : e.phases) BOOST_TEST(!p.overlapped);
  c.background_progress = true;

  // Stage 3: the forward gather overlaps the forward, the backward gather and the
  // reduce-scatter the backward.
  in = input(3, 2);
  in.tokens_per_rank = 10;
  const double g = 1e-6 + 2.0;  // all-gather or reduce-scatter of 4e9 B over 2 ranks
  e = estimate::estimate_step_time(in, c);
  BOOST_TEST(e.forward_s == std::max(0.02, g), tt::tolerance(1e-12));
  BOOST_TEST(e.backward_s == std::max(0.04, 2 * g), tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(micro_batches_repeat_the_per_micro_batch_collectives) {
  const estimate::Cluster c = cluster();
  const double half = estimate::collective_time(Collective::reduce_scatter, 4e9, 8, c);
  const double ar = estimate::collective_time(Collective::all_reduce, 4e9, 8, c);
  estimate::StepModelInput in = input(2, 8);
  in.micro_batches = 4;
  BOOST_TEST(estimate::estimate_step_time(in, c).backward_comm_s == 4 * half, tt::tolerance(1e-12));
  in.stage = 0;  // stage 0 reduces once, at the last micro-batch
  BOOST_TEST(estimate::estimate_step_time(in, c).backward_comm_s == ar, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(each_call_pays_the_latency) {
  const estimate::Cluster c = cluster();
  estimate::StepModelInput in = input(0, 8);
  in.groups = 10;
  const estimate::CommPhase p = phase(estimate::estimate_step_time(in, c), "gradient all-reduce");
  BOOST_TEST(p.calls == 10);
  BOOST_TEST(p.seconds == 10 * 28e-6 + 2 * 7.0 / 8 * 4e9 / 100e9, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(oversubscribed_cores_scale_compute_and_comm) {
  estimate::Cluster c = cluster();
  c.cores_per_node = 2;
  c.ranks_per_node = 4;
  estimate::StepModelInput in = input(1, 2);
  BOOST_TEST(estimate::estimate_step_time(in, c).oversubscription == 1.0);
  in.ranks = 4;  // 4 ranks on 2 cores: each gets half a core
  const estimate::StepEstimate e = estimate::estimate_step_time(in, c);
  BOOST_TEST(e.oversubscription == 2.0);
  BOOST_TEST(e.compute_s == 120.0, tt::tolerance(1e-12));
  const double half = estimate::collective_time(Collective::reduce_scatter, 4e9, 4, c);
  const double norm = estimate::collective_time(Collective::all_reduce, 8, 4, c);
  BOOST_TEST(e.step_comm_s == 2 * (2 * half + norm), tt::tolerance(1e-12));
  in.ranks = 2, in.threads_per_rank = 2;  // 2 ranks x 2 threads on 2 cores
  BOOST_TEST(estimate::estimate_step_time(in, c).oversubscription == 2.0);
  c.cores_per_node = 0;  // one device per rank: never oversubscribed
  in.ranks = 4;
  BOOST_TEST(estimate::estimate_step_time(in, c).oversubscription == 1.0);
}

BOOST_AUTO_TEST_CASE(fit_recovers_the_link) {
  estimate::Cluster truth;
  truth.ranks_per_node = 4;
  truth.intra_node = {2.5e9, 7e-6};
  std::vector<estimate::CollectiveSample> samples;
  for (int64_t n : {2, 4})
    for (Collective op : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather})
      for (double bytes = 1024; bytes <= 64e6; bytes *= 4) {
        const double over = n == 4 ? 2.0 : 1.0;  // 4 ranks on 2 cores
        samples.push_back({op, n, bytes, estimate::collective_time(op, bytes, n, truth) * over, over});
      }
  samples.push_back({Collective::all_reduce, 1, 4096, 1e-6, 1.0});  // one rank: ignored
  const estimate::Link fit = estimate::fit_link(samples);
  BOOST_TEST(fit.latency == 7e-6, tt::tolerance(1e-9));
  BOOST_TEST(fit.bandwidth == 2.5e9, tt::tolerance(1e-9));

  // Latency only (every size costs the same): β infinite, α exact.
  std::vector<estimate::CollectiveSample> flat;
  for (double bytes : {1e3, 1e4, 1e5}) flat.push_back({Collective::all_gather, 2, bytes, 5e-6, 1.0});
  const estimate::Link f2 = estimate::fit_link(flat);
  BOOST_TEST(f2.latency == 5e-6, tt::tolerance(1e-9));
  BOOST_TEST(f2.latency >= 0.0);
  BOOST_TEST(f2.bandwidth > 1e15);

  test::check_error([] { estimate::fit_link({{Collective::all_reduce, 1, 4096, 1e-6, 1.0}}); }, {"at least 2 ranks"});
  test::check_error(
      [] {
        estimate::fit_link({{Collective::all_reduce, 2, 4096, 0.0, 1.0}});
      },
      {"bad collective sample"});
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_errors_naming_the_field) {
  const estimate::Cluster c = cluster();
  auto with = [](auto change) {
    estimate::StepModelInput in = input(1, 8);
    change(in);
    return in;
  };
  test::check_error([&] { estimate::estimate_step_time(with([](auto& in) { in.stage = 4; }), c); }, {"stage", "4"});
  test::check_error([&] { estimate::estimate_step_time(with([](auto& in) { in.ranks = 0; }), c); }, {"ranks", "0"});
  test::check_error([&] { estimate::estimate_step_time(with([](auto& in) { in.num_params = 0; }), c); },
                    {"parameter count"});
  test::check_error([&] { estimate::estimate_step_time(with([](auto& in) { in.persistent_params = 2e9; }), c); },
                    {"persistent"});
  test::check_error([&] { estimate::estimate_step_time(with([](auto& in) { in.micro_batches = 0; }), c); },
                    {"micro-batches"});
  estimate::Cluster no_rate = c;
  no_rate.flops_per_rank = 0;
  test::check_error([&] { estimate::estimate_step_time(input(0, 8), no_rate); }, {"flops_per_rank"});
  estimate::Cluster bad_link = c;
  bad_link.inter_node.bandwidth = 0;
  test::check_error([&] { estimate::estimate_step_time(input(0, 8), bad_link); }, {"inter_node bandwidth"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_perf_model
