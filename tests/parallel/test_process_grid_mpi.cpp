// ProcessGrid: for every tp × dp × pp factorization of the world size, coordinates follow
// Megatron's layout (Note [Rank layout]) and every group communicator holds exactly the
// expected world ranks in the expected order (all-gathered inside the group); emulated
// nodes give the expected node index, local rank and intra/inter-node groups; for every ep
// and hpz dividing dp, the expert-parallel, expert-data-parallel and hpZ groups hold the
// dp ranks DeepSpeed's layout gives them; tied groups hold the pipeline stages asked for.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <sstream>
#include <tuple>

#include "parallel/counting_communicator.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_process_grid_mpi)

using namespace triad;
using namespace triad::parallel;

namespace {

std::vector<std::tuple<int, int, int>> factorizations(int n) {
  std::vector<std::tuple<int, int, int>> out;
  for (int tp = 1; tp <= n; ++tp)
    for (int dp = 1; dp <= n; ++dp)
      if (n % (tp * dp) == 0) out.emplace_back(tp, dp, n / (tp * dp));
  return out;
}

// The world ranks of a group's members, in group-rank order (all-gathered inside it).
std::vector<int64_t> members(const CommunicatorPtr& group, int world_rank) {
  Tensor mine = Tensor::full({1}, world_rank, DType::i64), all = Tensor::empty({group->size()}, DType::i64);
  group->all_gather(mine, all)->wait();
  return all.to_vector<int64_t>();
}

std::string str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (auto x : v) os << x << " ";
  return os.str();
}

void check_group(const std::string& what, const CommunicatorPtr& group, int world_rank,
                 const std::vector<int64_t>& expected, int expected_rank) {
  BOOST_TEST(group->size() == int(expected.size()), what << " size");
  BOOST_TEST(group->rank() == expected_rank, what << " rank");
  const auto got = members(group, world_rank);
  BOOST_TEST(got == expected, what << ": members " << str(got) << "expected " << str(expected));
}

// Checks one grid on this rank against the layout formula and emulated nodes of `rpn`
// consecutive ranks (rpn == 0: MPI's nodes, all ranks on this one machine).
void check_grid(const ProcessGrid& g, int tp, int dp, int pp, int rpn) {
  const int n = g.size(), r = g.rank();
  std::ostringstream os;
  os << "tp " << tp << " dp " << dp << " pp " << pp << " rpn " << rpn << " rank " << r;
  const std::string at = os.str();
  BOOST_TEST(g.tp_size() == tp);
  BOOST_TEST(g.dp_size() == dp);
  BOOST_TEST(g.pp_size() == pp);
  const int tr = r % tp, dr = (r / tp) % dp, pr = r / (tp * dp);
  BOOST_TEST(g.tp_rank() == tr, at);
  BOOST_TEST(g.dp_rank() == dr, at);
  BOOST_TEST(g.pp_rank() == pr, at);
  BOOST_TEST(g.rank_of(tr, dr, pr) == r, at);
  BOOST_TEST(tr + tp * (dr + dp * pr) == r, at);

  std::vector<int64_t> tp_m, dp_m, pp_m;
  for (int t = 0; t < tp; ++t) tp_m.push_back(t + tp * (dr + dp * pr));
  for (int d = 0; d < dp; ++d) dp_m.push_back(tr + tp * (d + dp * pr));
  for (int p = 0; p < pp; ++p) pp_m.push_back(tr + tp * (dr + dp * p));
  check_group(
      at + " world", g.world(), r,
      [n] {
        std::vector<int64_t> v(n);
        for (int q = 0; q < n; ++q) v[q] = q;
        return v;
      }(),
      r);
  check_group(at + " tp", g.tp(), r, tp_m, tr);
  check_group(at + " dp", g.dp(), r, dp_m, dr);
  check_group(at + " pp", g.pp(), r, pp_m, pr);

  const int per = rpn > 0 ? rpn : n;
  auto node = [per](int64_t q) { return int(q / per); };
  BOOST_TEST(g.ranks_per_node() == per, at);
  BOOST_TEST(g.num_nodes() == n / per, at);
  BOOST_TEST(g.node_index() == r / per, at);
  BOOST_TEST(g.local_rank() == r % per, at);
  // intra: the dp group on my node; inter: the dp group members at my position on theirs.
  auto pos = [&](int64_t q) {
    int k = 0;
    for (int64_t m : dp_m)
      if (m < q && node(m) == node(q)) ++k;
    return k;
  };
  std::vector<int64_t> intra, inter;
  for (int64_t m : dp_m) {
    if (node(m) == node(r)) intra.push_back(m);
    if (pos(m) == pos(r)) inter.push_back(m);
  }
  check_group(at + " intra_node", g.intra_node(), r, intra, pos(r));
  check_group(at + " inter_node", g.inter_node(), r, inter,
              int(std::find(inter.begin(), inter.end(), int64_t(r)) - inter.begin()));
  std::vector<int> dp_nodes;
  for (int64_t m : dp_m) dp_nodes.push_back(node(m));
  BOOST_TEST(g.dp_nodes() == dp_nodes, at);
  if (rpn == 0 || per % tp == 0 || tp % per == 0) {
    // The usual layouts: inter_node() has one member per node holding part of the dp group.
    BOOST_TEST(g.intra_node()->size() * g.inter_node()->size() == dp, at);
  }
}

// Checks the groups inside this rank's dp group against DeepSpeed's layout: ep() the ep
// consecutive dp ranks around this one, edp() the dp ranks at its position in theirs (its
// dp rank modulo ep), hpz() the hpz consecutive dp ranks around it.
void check_dp_subgroups(const ProcessGrid& g, int ep, int hpz) {
  const int tp = g.tp_size(), dp = g.dp_size(), r = g.rank();
  const int tr = r % tp, dr = (r / tp) % dp, pr = r / (tp * dp);
  std::ostringstream os;
  os << "tp " << tp << " dp " << dp << " pp " << g.pp_size() << " ep " << ep << " hpz " << hpz << " rank " << r;
  const std::string at = os.str();
  std::vector<int64_t> ep_m, edp_m, hpz_m;
  for (int d = 0; d < dp; ++d) {
    const int64_t q = tr + tp * (d + dp * pr);
    if (d / ep == dr / ep) ep_m.push_back(q);
    if (d % ep == dr % ep) edp_m.push_back(q);
    if (d / hpz == dr / hpz) hpz_m.push_back(q);
  }
  BOOST_TEST(g.ep_size() == ep, at);
  BOOST_TEST(g.edp_size() == dp / ep, at);
  BOOST_TEST(g.hpz_size() == hpz, at);
  BOOST_TEST(g.ep_rank() == dr % ep, at);
  BOOST_TEST(g.edp_rank() == dr / ep, at);
  check_group(at + " ep", g.ep(), r, ep_m, dr % ep);
  check_group(at + " edp", g.edp(), r, edp_m, dr / ep);
  check_group(at + " hpz", g.hpz(), r, hpz_m, dr % hpz);
}

}  // namespace

BOOST_AUTO_TEST_CASE(expert_and_hpz_groups_for_every_divisor_of_dp) {
  const int n = world()->size();
  int grids = 0;
  for (auto [tp, dp, pp] : factorizations(n))
    for (int k = 1; k <= dp; ++k) {
      if (dp % k != 0) continue;
      ProcessGrid g(world(), {.tp = tp, .dp = dp, .pp = pp, .ep = k, .hpz = dp / k});
      check_dp_subgroups(g, k, dp / k);
      ++grids;
    }
  BOOST_TEST_MESSAGE(grids << " grids");
  BOOST_TEST(grids >= int(factorizations(n).size()));
}

// The groups written out, world rank by world rank: at n = 8 with tp 2, the dp groups are
// {0, 2, 4, 6} and {1, 3, 5, 7}; ep 2 pairs their consecutive members.
BOOST_AUTO_TEST_CASE(expert_groups_written_out) {
  const int n = world()->size(), r = world()->rank();
  using Groups = std::vector<std::vector<int64_t>>;
  struct Case {
    int tp, dp, ep;
    Groups ep_groups, edp_groups;  // of each world rank
  };
  std::vector<Case> cases;
  if (n == 2) cases.push_back({1, 2, 2, {{0, 1}, {0, 1}}, {{0}, {1}}});
  if (n == 4) {
    cases.push_back({1, 4, 2, {{0, 1}, {0, 1}, {2, 3}, {2, 3}}, {{0, 2}, {1, 3}, {0, 2}, {1, 3}}});
    cases.push_back({1, 4, 4, {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}, {{0}, {1}, {2}, {3}}});
  }
  if (n == 8) {
    cases.push_back({2, 4, 2, {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}},
                     {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}}});
    cases.push_back({1, 8, 4, {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6, 7}, {4, 5, 6, 7},
                               {4, 5, 6, 7}, {4, 5, 6, 7}},
                     {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}}});
  }
  BOOST_TEST_REQUIRE(!cases.empty(), "no written-out case for " << n << " ranks");
  for (const Case& c : cases) {
    ProcessGrid g(world(), {.tp = c.tp, .dp = c.dp, .pp = n / (c.tp * c.dp), .ep = c.ep});
    const std::string at = "tp " + std::to_string(c.tp) + " ep " + std::to_string(c.ep);
    BOOST_TEST(members(g.ep(), r) == c.ep_groups[size_t(r)], at << " ep of rank " << r);
    BOOST_TEST(members(g.edp(), r) == c.edp_groups[size_t(r)], at << " edp of rank " << r);
    BOOST_TEST(g.str().find("ep=" + std::to_string(c.ep)) != std::string::npos, g.str());
  }
}

BOOST_AUTO_TEST_CASE(tied_groups_hold_the_stages_asked_for) {
  const int n = world()->size(), r = world()->rank();
  int checked = 0;
  for (auto [tp, dp, pp] : factorizations(n)) {
    if (pp < 2) continue;
    ProcessGrid g(world(), {.tp = tp, .dp = dp, .pp = pp});
    std::vector<std::vector<int>> sets = {{0, pp - 1}, {pp - 1}, {}};  // Megatron's embedding group first
    std::vector<int> all;
    for (int s = 0; s < pp; ++s) all.push_back(s);
    sets.push_back(all);
    for (const std::vector<int>& stages : sets) {
      std::ostringstream os;
      os << "tp " << tp << " dp " << dp << " pp " << pp << " stages " << stages.size() << " rank " << r;
      const CommunicatorPtr group = g.tied_group(stages);
      const auto at = std::find(stages.begin(), stages.end(), g.pp_rank());
      if (at == stages.end()) {
        BOOST_TEST(!group, os.str());
        continue;
      }
      BOOST_TEST_REQUIRE(group != nullptr, os.str());
      std::vector<int64_t> expected;
      for (int s : stages) expected.push_back(g.rank_of(g.tp_rank(), g.dp_rank(), s));
      check_group(os.str() + " tied", group, r, expected, int(at - stages.begin()));
      ++checked;
    }
    test::check_error([&] { g.tied_group({pp - 1, 0}); }, {"tied_group", "increasing"});
    test::check_error([&] { g.tied_group({0, pp}); }, {"tied_group", "[0, " + std::to_string(pp) + ")"});
    const bool first_holds = g.tied_group({0}) != nullptr;  // still in step afterwards
    BOOST_TEST(first_holds == (g.pp_rank() == 0));
  }
  BOOST_TEST(checked > 0);
}

BOOST_AUTO_TEST_CASE(every_factorization_and_emulated_nodes) {
  const int n = world()->size();
  int grids = 0;
  for (auto [tp, dp, pp] : factorizations(n)) {
    for (int rpn : {0, 1, 2}) {
      ProcessGrid g(world(), {.tp = tp, .dp = dp, .pp = pp, .ranks_per_node = rpn});
      check_grid(g, tp, dp, pp, rpn);
      ++grids;
    }
  }
  BOOST_TEST_MESSAGE(grids << " grids");
  BOOST_TEST(grids == 3 * int(factorizations(n).size()));
}

BOOST_AUTO_TEST_CASE(four_rank_nodes_at_eight) {
  const int n = world()->size();
  if (n % 4 != 0 || n == 4) return;
  for (auto [tp, dp, pp] : factorizations(n)) {
    ProcessGrid g(world(), {.tp = tp, .dp = dp, .pp = pp, .ranks_per_node = 4});
    check_grid(g, tp, dp, pp, 4);
  }
}

BOOST_AUTO_TEST_CASE(groups_of_a_counting_world_share_its_counters) {
  auto cc = std::make_shared<CountingCommunicator>(world());
  const int n = cc->size();
  ProcessGrid g(cc, {.tp = 1, .dp = n, .pp = 1, .ranks_per_node = 1});
  BOOST_TEST(g.dp()->name() == "counting(mpi)");
  BOOST_TEST(g.inter_node()->name() == "counting(mpi)");
  cc->reset();
  Tensor t = Tensor::ones({16});
  g.dp()->all_reduce(t)->wait();
  g.inter_node()->all_reduce(t)->wait();
  BOOST_TEST(cc->stats().at("all_reduce").calls == 2);
  BOOST_TEST(cc->stats().at("all_reduce").payload_bytes == 2 * 64);
  BOOST_TEST(t.to_vector<float>()[0] == float(n * n));
}

BOOST_AUTO_TEST_CASE(invalid_shapes_throw) {
  const int n = world()->size();
  const std::string ns = std::to_string(n);
  test::check_error([&] { ProcessGrid(world(), {.tp = 2, .dp = n, .pp = 1}); },
                    {"tp (2)", "dp (" + ns + ")", "pp (1)", "world size " + ns});
  test::check_error([&] { ProcessGrid(world(), {.tp = n, .dp = 1, .pp = 3}); },
                    {"tp (" + ns + ")", "pp (3)", "world size " + ns});
  test::check_error([&] { ProcessGrid(world(), {.tp = 0, .dp = n, .pp = 1}); }, {"tp (0)", "world size"});
  test::check_error([&] { ProcessGrid(world(), {.tp = 1, .dp = n, .pp = 1, .ranks_per_node = 3}); },
                    {"ranks_per_node 3", "world size " + ns});
  test::check_error([&] { ProcessGrid(world(), {.tp = 1, .dp = n, .pp = 1, .ranks_per_node = -1}); },
                    {"ranks_per_node -1"});
  test::check_error([&] { ProcessGrid(nullptr, {.tp = 1, .dp = 1, .pp = 1}); }, {"null"});
  test::check_error([&] { ProcessGrid(world(), {.dp = n, .ep = 3}); }, {"ep (3)", "must divide dp (" + ns + ")"});
  test::check_error([&] { ProcessGrid(world(), {.dp = n, .ep = 0}); }, {"ep (0)", "dp (" + ns + ")"});
  test::check_error([&] { ProcessGrid(world(), {.tp = n, .dp = 1, .ep = 2}); }, {"ep (2)", "must divide dp (1)"});
  test::check_error([&] { ProcessGrid(world(), {.dp = n, .hpz = 3}); }, {"hpz (3)", "must divide dp (" + ns + ")"});
  // Still in step afterwards.
  ProcessGrid g(world(), {.tp = 1, .dp = n, .pp = 1});
  BOOST_TEST(g.dp()->size() == n);
  BOOST_TEST(!g.str().empty());
}

BOOST_AUTO_TEST_SUITE_END()  // test_process_grid_mpi
