// CountingCommunicator: calls, payload bytes and bus bytes per collective equal
// nccl-tests' definitions exactly (REFERENCE.md), on the world and on split groups that
// share the counters; results still pass through unchanged.
#include <boost/test/unit_test.hpp>

#include "parallel/counting_communicator.h"
#include "parallel/runtime.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_counting_mpi)

using namespace triad;
using namespace triad::parallel;

namespace {

// Bus bytes by nccl-tests' factors, in exact integer arithmetic (S·2(n−1) divisible by n here).
double bus(const std::string& kind, double S, int n) {
  if (kind == "all_reduce") return S * 2 * (n - 1) / n;
  if (kind == "reduce_scatter" || kind == "all_gather" || kind == "all_to_all") return S * (n - 1) / n;
  return S;
}

void check_kind(const CountingCommunicator& cc, const std::string& kind, int64_t calls, double payload, int n) {
  const CollectiveStats s = cc.stats().at(kind);
  BOOST_TEST(s.calls == calls, kind << " calls");
  BOOST_TEST(s.payload_bytes == payload, kind << " payload " << s.payload_bytes << " expected " << payload);
  BOOST_TEST(s.bus_bytes == bus(kind, payload, n),
             kind << " bus " << s.bus_bytes << " expected " << bus(kind, payload, n) << " (n " << n << ")");
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_collective_by_the_formulas) {
  CountingCommunicator cc(world());
  const int n = cc.size(), r = cc.rank();
  BOOST_TEST(cc.name() == "counting(mpi)");
  BOOST_TEST(cc.stats().size() == 7u);
  BOOST_TEST(cc.bus_bytes() == 0);

  const int64_t k = 40;
  Tensor ar = Tensor::ones({n * k});  // f32
  cc.all_reduce(ar)->wait();
  cc.all_reduce(ar, ReduceOp::max)->wait();
  check_kind(cc, "all_reduce", 2, 2.0 * n * k * 4, n);
  BOOST_TEST(ar.to_vector<float>()[0] == float(n));  // results pass through

  Tensor rs_in = Tensor::ones({n * k}, DType::bf16), rs_out = Tensor::empty({k}, DType::bf16);
  cc.reduce_scatter(rs_in, rs_out)->wait();
  check_kind(cc, "reduce_scatter", 1, double(n * k * 2), n);  // total input

  Tensor ag_in = Tensor::ones({k}, DType::f64), ag_out = Tensor::empty({n * k}, DType::f64);
  cc.all_gather(ag_in, ag_out)->wait();
  check_kind(cc, "all_gather", 1, double(n * k * 8), n);  // total output

  Tensor a2a_in = Tensor::ones({n * k}, DType::i64), a2a_out = Tensor::empty({n * k}, DType::i64);
  cc.all_to_all(a2a_in, a2a_out)->wait();
  check_kind(cc, "all_to_all", 1, double(n * k * 8), n);  // send buffer

  Tensor bc = Tensor::ones({k + 1}, DType::i32);
  cc.broadcast(bc, n - 1)->wait();
  check_kind(cc, "broadcast", 1, double((k + 1) * 4), n);

  Tensor s = Tensor::ones({k + 3}, DType::i8), rv = Tensor::empty({k + 3}, DType::i8);
  WorkPtr rw = cc.recv(rv, (r + n - 1) % n, 3);
  cc.send(s, (r + 1) % n, 3)->wait();
  rw->wait();
  check_kind(cc, "send", 1, double(k + 3), n);
  check_kind(cc, "recv", 1, double(k + 3), n);
  // send_recv counts as one send and one recv.
  Tensor s2 = Tensor::ones({k + 5}, DType::i8), rv2 = Tensor::empty({k + 5}, DType::i8);
  cc.send_recv(s2, (r + 1) % n, rv2, (r + n - 1) % n, 3)->wait();
  check_kind(cc, "send", 2, double(2 * k + 8), n);
  check_kind(cc, "recv", 2, double(2 * k + 8), n);

  cc.barrier();  // not counted
  double total = 0;
  for (const auto& [kind, st] : cc.stats()) total += st.bus_bytes;
  BOOST_TEST(cc.bus_bytes() == total);
  const double expected_total = bus("all_reduce", 2.0 * n * k * 4, n) + bus("reduce_scatter", n * k * 2, n) +
                                bus("all_gather", n * k * 8, n) + bus("all_to_all", n * k * 8, n) + (k + 1) * 4 +
                                2.0 * (k + 3) + 2.0 * (k + 5);
  BOOST_TEST(cc.bus_bytes() == expected_total);

  const nlohmann::json j = cc.to_json();
  BOOST_TEST(j.at("bus_bytes").get<double>() == expected_total);
  BOOST_TEST(j.at("by_collective").size() == 7u);
  BOOST_TEST(j.at("by_collective").at("all_reduce").at("calls").get<int64_t>() == 2);
  BOOST_TEST(j.at("by_collective").at("all_gather").at("payload_bytes").get<double>() == double(n * k * 8));
  BOOST_TEST(j.at("by_collective").at("all_to_all").at("bus_bytes").get<double>() == bus("all_to_all", n * k * 8, n));

  cc.reset();
  BOOST_TEST(cc.bus_bytes() == 0);
  for (const auto& [kind, st] : cc.stats()) BOOST_TEST(st.calls == 0, kind);
}

BOOST_AUTO_TEST_CASE(splits_share_the_counters) {
  CountingCommunicator cc(world());
  const int n = cc.size(), r = cc.rank();
  const int half = n / 2;
  auto sub = cc.split(r < half ? 0 : 1, r);
  BOOST_TEST(sub->name() == "counting(mpi)");
  BOOST_TEST(sub->size() == half);

  Tensor t = Tensor::ones({n * 8});  // 32n bytes
  sub->all_reduce(t)->wait();        // n = half
  cc.all_reduce(t)->wait();          // n = world
  const double S = n * 8 * 4;
  const CollectiveStats s = cc.stats().at("all_reduce");
  BOOST_TEST(s.calls == 2);
  BOOST_TEST(s.payload_bytes == 2 * S);
  BOOST_TEST(s.bus_bytes == bus("all_reduce", S, half) + bus("all_reduce", S, n));
  BOOST_TEST(t.to_vector<float>()[0] == float(half * n));

  // The same counters, seen from the split communicator.
  auto* sub_cc = dynamic_cast<CountingCommunicator*>(sub.get());
  BOOST_REQUIRE(sub_cc != nullptr);
  BOOST_TEST(sub_cc->bus_bytes() == cc.bus_bytes());
  sub_cc->reset();
  BOOST_TEST(cc.bus_bytes() == 0);

  // A grandchild, too.
  auto leaf = sub->split(0, 0);
  Tensor in = Tensor::ones({half * 5}), out = Tensor::empty({5});
  leaf->reduce_scatter(in, out)->wait();
  check_kind(cc, "reduce_scatter", 1, half * 5 * 4, half);
}

BOOST_AUTO_TEST_CASE(failed_calls_are_not_counted) {
  CountingCommunicator cc(world());
  const int n = cc.size();
  test::check_error([&] { cc.all_gather(Tensor::ones({3}), Tensor::ones({n * 3 + 1})); }, {"all_gather"});
  BOOST_TEST(cc.stats().at("all_gather").calls == 0);
  BOOST_TEST(cc.bus_bytes() == 0);
}

BOOST_AUTO_TEST_CASE(bus_bytes_split_between_and_within_nodes) {
  // Nodes of two ranks (rank / 2): with 2 ranks one node, with 4 and 8 ranks several.
  const int n = world()->size(), r = world()->rank();
  std::vector<int> nodes;
  for (int q = 0; q < n; ++q) nodes.push_back(q / 2);
  CountingCommunicator cc(world(), nodes);
  const bool several = n > 2;
  const int64_t k = 16;
  Tensor in = Tensor::ones({k}), out = Tensor::empty({n * k});
  cc.all_gather(in, out)->wait();  // a ring over every rank: all of it crosses when it spans nodes
  const double gathered = bus("all_gather", n * k * 4.0, n);
  BOOST_TEST(cc.stats().at("all_gather").inter_node_bus_bytes == (several ? gathered : 0.0));
  // all_to_all: one chunk of k f32 per peer; n − 2 of the peers are on other nodes.
  Tensor a = Tensor::ones({n * k}), b = Tensor::empty({n * k});
  cc.all_to_all(a, b)->wait();
  BOOST_TEST(cc.stats().at("all_to_all").inter_node_bus_bytes == double((n - 2) * k * 4));
  BOOST_TEST(cc.stats().at("all_to_all").bus_bytes == double((n - 1) * k * 4));
  // all_to_allv, counted as all_to_all: q + 1 f32 to each rank q, exactly what leaves
  // this rank crossing the bus, the chunks of ranks on other nodes between nodes.
  cc.reset();
  std::vector<int64_t> v_sent, v_received(size_t(n), int64_t(r) + 1);
  double others = 0, off_node = 0;
  int64_t total = 0;
  for (int q = 0; q < n; ++q) {
    v_sent.push_back(q + 1);
    total += q + 1;
    if (q != r) others += (q + 1) * 4.0;
    if (q / 2 != r / 2 && several) off_node += (q + 1) * 4.0;
  }
  Tensor v_in = Tensor::ones({total}), v_out = Tensor::empty({int64_t(n) * (r + 1)});
  cc.all_to_allv(v_in, v_sent, v_out, v_received)->wait();
  BOOST_TEST(cc.stats().at("all_to_all").calls == 1);
  BOOST_TEST(cc.stats().at("all_to_all").payload_bytes == total * 4.0);
  BOOST_TEST(cc.stats().at("all_to_all").bus_bytes == others);
  BOOST_TEST(cc.stats().at("all_to_all").inter_node_bus_bytes == off_node);
  // A ring exchange: the pair (2j, 2j + 1) shares a node, so even ranks send within it.
  Tensor s = Tensor::ones({k}), t = Tensor::empty({k});
  cc.send_recv(s, (r + 1) % n, t, (r + n - 1) % n)->wait();
  const double sent = (r % 2 == 1 && several) ? k * 4.0 : 0.0, received = (r % 2 == 0 && several) ? k * 4.0 : 0.0;
  BOOST_TEST(cc.stats().at("send").inter_node_bus_bytes == sent);
  BOOST_TEST(cc.stats().at("recv").inter_node_bus_bytes == received);
  const nlohmann::json j = cc.to_json();
  BOOST_TEST(j.at("inter_node_bus_bytes").get<double>() == cc.inter_node_bus_bytes());
  BOOST_TEST(j.at("intra_node_bus_bytes").get<double>() == cc.bus_bytes() - cc.inter_node_bus_bytes());

  // A split learns its ranks' nodes: the pairs' groups (one node each) count nothing across;
  // the group of even ranks (one per node) everything.
  cc.reset();
  auto pair = cc.split(r / 2, r), evens = cc.split(r % 2, r);
  auto& evens_cc = dynamic_cast<CountingCommunicator&>(*evens);
  BOOST_TEST(evens_cc.nodes().size() == (several ? size_t(evens->size()) : 0u));
  Tensor x = Tensor::ones({4});
  pair->all_reduce(x)->wait();
  BOOST_TEST(cc.inter_node_bus_bytes() == 0.0);
  evens->all_reduce(x)->wait();
  BOOST_TEST(cc.inter_node_bus_bytes() == (several ? bus("all_reduce", 16, n / 2) : 0.0));
  // A communicator counted alongside takes its own node map.
  const double before = cc.inter_node_bus_bytes();
  auto alongside = cc.counting_alongside(evens_cc.inner(), std::vector<int>(size_t(evens->size()), 0));
  alongside->all_reduce(x)->wait();
  BOOST_TEST(cc.stats().at("all_reduce").calls == 3);
  BOOST_TEST(cc.inter_node_bus_bytes() == before);
}

BOOST_AUTO_TEST_SUITE_END()  // test_counting_mpi
