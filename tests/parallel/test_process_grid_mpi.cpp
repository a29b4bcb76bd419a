// ProcessGrid: for every tp × dp × pp factorization of the world size, coordinates follow
// Megatron's layout (Note [Rank layout]) and every group communicator holds exactly the
// expected world ranks in the expected order (all-gathered inside the group); emulated
// nodes give the expected node index, local rank and intra/inter-node groups.
#define BOOST_TEST_MODULE process_grid_mpi
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <sstream>
#include <tuple>

#include "parallel/counting_communicator.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/mpi_fixture.h"

using namespace triad;
using test::MpiFixture;
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);
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
  if (rpn == 0 || per % tp == 0 || tp % per == 0) {
    // The usual layouts: inter_node() has one member per node holding part of the dp group.
    BOOST_TEST(g.intra_node()->size() * g.inter_node()->size() == dp, at);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_factorization_and_emulated_nodes) {
  const int n = world()->size();
  int grids = 0;
  for (auto [tp, dp, pp] : factorizations(n)) {
    for (int rpn : {0, 1, 2}) {
      ProcessGrid g(world(), tp, dp, pp, rpn);
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
    ProcessGrid g(world(), tp, dp, pp, 4);
    check_grid(g, tp, dp, pp, 4);
  }
}

BOOST_AUTO_TEST_CASE(groups_of_a_counting_world_share_its_counters) {
  auto cc = std::make_shared<CountingCommunicator>(world());
  const int n = cc->size();
  ProcessGrid g(cc, 1, n, 1, 1);
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
  test::check_error([&] { ProcessGrid(world(), 2, n, 1); },
                    {"tp (2)", "dp (" + ns + ")", "pp (1)", "world size " + ns});
  test::check_error([&] { ProcessGrid(world(), n, 1, 3); }, {"tp (" + ns + ")", "pp (3)", "world size " + ns});
  test::check_error([&] { ProcessGrid(world(), 0, n, 1); }, {"tp (0)", "world size"});
  test::check_error([&] { ProcessGrid(world(), 1, n, 1, 3); }, {"ranks_per_node 3", "world size " + ns});
  test::check_error([&] { ProcessGrid(world(), 1, n, 1, -1); }, {"ranks_per_node -1"});
  test::check_error([&] { ProcessGrid(nullptr, 1, 1, 1); }, {"null"});
  // Still in step afterwards.
  ProcessGrid g(world(), 1, n, 1);
  BOOST_TEST(g.dp()->size() == n);
  BOOST_TEST(!g.str().empty());
}
