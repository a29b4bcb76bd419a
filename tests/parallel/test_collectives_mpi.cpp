// Every collective of MpiCommunicator against closed-form values on every rank: rank r
// contributes v(r, j) (small integers, so sums are exact in bf16/f16 and i8), and each
// rank evaluates the expected result from the formula for all ranks. Every dtype, sizes
// 1, odd and non-divisible ones, in-place forms, several operations in flight, split
// communicators, and argument errors (thrown locally, before communicating: no hang).
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "parallel/exchange_thresholds.h"
#include "parallel/mpi_communicator.h"
#include "parallel/runtime.h"
#include "parallel/watchdog.h"
#include "support/check.h"
#include "support/collective_values.h"
#include "tensor/ops.h"

BOOST_AUTO_TEST_SUITE(test_collectives_mpi)

using namespace triad;
using test::fold;
using test::name;
using test::v_for;
using test::v_mm;
using test::v_sum;
using namespace triad::parallel;

namespace {

CommunicatorPtr comm() { return world(); }

// A 1-d tensor of `n` elements, element j = f(j).
template <class T>
Tensor make(int64_t n, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dtype_of<T>::value);
  T* p = t.data<T>();
  for (int64_t j = 0; j < n; ++j) p[j] = from_double<T>(f(j));
  return t;
}

// Counts elements of t that differ from expected(j) (beyond tol) and reports the first.
template <class T>
void check_values(const std::string& what, const Tensor& t, const std::function<double(int64_t)>& expected,
                  double tol = 0) {
  const T* p = t.data<T>();
  int64_t bad = 0, first = -1;
  for (int64_t j = 0; j < t.numel(); ++j) {
    const double e = expected(j), got = to_double(p[j]);
    if (!(std::abs(got - e) <= tol * std::max(1.0, std::abs(e)))) {
      if (bad++ == 0) first = j;
    }
  }
  BOOST_CHECK_MESSAGE(bad == 0, what << " (" << dtype_name(dtype_of<T>::value) << ", rank " << comm()->rank() << "/"
                                     << comm()->size() << "): " << bad << " of " << t.numel()
                                     << " elements wrong; first at " << first << ": got "
                                     << (first >= 0 ? to_double(p[first]) : 0.0) << ", expected "
                                     << (first >= 0 ? expected(first) : 0.0));
}

// Element i of the chunk that rank `from` sends to rank `to` (all_to_all) on n ranks:
// from·n + to − 99·(i % 2). On up to 10 ranks it lies in [−99, 99]: exact in every dtype,
// i8 included, and never the −100 that outputs start as.
double route_code(int n, int from, int to, int64_t i) { return double(from * n + to - 99 * (i % 2)); }

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};

using AllTypes = boost::mpl::list<float, double, int64_t, bf16, f16, int32_t, int8_t>;

}  // namespace

BOOST_AUTO_TEST_CASE(world_basics) {
  auto c = comm();
  BOOST_TEST(initialized());
  BOOST_TEST(c->size() == world_size());
  BOOST_TEST(c->rank() == world_rank());
  BOOST_TEST(c->name() == "mpi");
  BOOST_TEST(ranks_on_node() == c->size());  // one machine
  BOOST_TEST(rank_on_node() == c->rank());
  BOOST_TEST(node_id() == 0);
  BOOST_TEST(threads_per_rank(3) == 3);
  BOOST_TEST(threads_per_rank(0) >= 1);
  BOOST_TEST(init(boost::unit_test::framework::master_test_suite().argc,
                  boost::unit_test::framework::master_test_suite().argv) == c);  // idempotent
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_reduce, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int64_t len : {1, 7, 1001, 65537}) {
    for (ReduceOp op : kOps) {
      Tensor t = make<T>(len, [&](int64_t j) { return v_for(op, r, j); });
      c->all_reduce(t, op)->wait();
      check_values<T>(std::string("all_reduce ") + name(op) + " len " + std::to_string(len), t,
                      [&](int64_t j) { return fold(op, n, j); });
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_scatter, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int64_t k : {1, 1023}) {
    for (ReduceOp op : kOps) {
      Tensor in = make<T>(n * k, [&](int64_t j) { return v_for(op, r, j); });
      Tensor out = make<T>(k, [](int64_t) { return -100; });
      c->reduce_scatter(in, out, op)->wait();
      const std::string what = std::string("reduce_scatter ") + name(op) + " k " + std::to_string(k);
      check_values<T>(what, out, [&](int64_t i) { return fold(op, n, r * k + i); });
      check_values<T>(what + " leaves its input", in, [&](int64_t j) { return v_for(op, r, j); });

      // In place: output is chunk rank() of the input.
      Tensor buf = make<T>(n * k, [&](int64_t j) { return v_for(op, r, j); });
      Tensor chunk = ops::narrow(buf, 0, r * k, k);
      c->reduce_scatter(buf, chunk, op)->wait();
      check_values<T>(what + " in place", chunk, [&](int64_t i) { return fold(op, n, r * k + i); });
    }
  }
}

// reduce_scatter on communicators of 1, 2 and 3 ranks (the world split by rank mod 3:
// sizes 1 and 1 on 2 ranks, 2, 1, 1 on 4, 3, 3, 2 on 8), both placements, with chunks
// from one element to more than a message MPI sends eagerly and more than the CPU
// allocator caches (in place, the result lands in chunk rank() without a copy: Note
// [Reduce-scatter by exchange]).
BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_scatter_on_1_2_3_ranks, T, AllTypes) {
  auto sub = comm()->split(comm()->rank() % 3, 0);
  const int n = sub->size(), r = sub->rank();
  for (int64_t k : {1, 5, 3001, 40000}) {
    for (ReduceOp op : kOps) {
      const std::string what =
          std::string("reduce_scatter on ") + std::to_string(n) + " ranks " + name(op) + " k " + std::to_string(k);
      Tensor buf = make<T>(n * k, [&](int64_t j) { return v_for(op, r, j); });
      Tensor chunk = ops::narrow(buf, 0, r * k, k);
      sub->reduce_scatter(buf, chunk, op)->wait();
      check_values<T>(what + " in place", chunk, [&](int64_t i) { return fold(op, n, r * k + i); });

      Tensor in = make<T>(n * k, [&](int64_t j) { return v_for(op, r, j); });
      Tensor out = make<T>(k, [](int64_t) { return -100; });
      sub->reduce_scatter(in, out, op)->wait();
      check_values<T>(what, out, [&](int64_t i) { return fold(op, n, r * k + i); });
    }
  }
}

// In-place reduce_scatters in flight together, beside the user's own messages (same tag 0
// on the same communicator), completed in reverse order, by test() and by a dropped Work.
BOOST_AUTO_TEST_CASE(in_place_reduce_scatters_in_flight_with_user_messages) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t ks[] = {1, 700, 20000};
  std::vector<Tensor> bufs;
  std::vector<WorkPtr> works;
  Tensor got = Tensor::full({700}, -1), sent = Tensor::full({700}, r);
  WorkPtr user_recv = c->recv(got, prev, 0);
  for (int64_t k : ks) {
    bufs.push_back(make<float>(n * k, [&](int64_t j) { return v_sum(r, j + k); }));
    works.push_back(c->reduce_scatter(bufs.back(), ops::narrow(bufs.back(), 0, r * k, k)));
  }
  WorkPtr user_send = c->send(sent, next, 0);
  for (int i = 2; i >= 0; --i) works[size_t(i)]->wait();
  user_send->wait();
  user_recv->wait();
  check_values<float>("user message beside reduce_scatter", got, [&](int64_t) { return prev; });
  for (int i = 0; i < 3; ++i) {
    const int64_t k = ks[i];
    check_values<float>("in flight in place reduce_scatter k " + std::to_string(k),
                        ops::narrow(bufs[size_t(i)], 0, r * k, k),
                        [&](int64_t e) { return fold(ReduceOp::sum, n, r * k + e + k); });
  }

  const int64_t k = 4099;
  Tensor polled = make<double>(n * k, [&](int64_t j) { return v_sum(r, j); });
  WorkPtr w = c->reduce_scatter(polled, ops::narrow(polled, 0, r * k, k));
  while (!w->test()) {
  }
  BOOST_TEST(w->test());
  w->wait();
  check_values<double>("in place reduce_scatter by test()", ops::narrow(polled, 0, r * k, k),
                       [&](int64_t e) { return fold(ReduceOp::sum, n, r * k + e); });

  Tensor dropped = make<bf16>(n * k, [&](int64_t j) { return v_sum(r, j); });
  c->reduce_scatter(dropped, ops::narrow(dropped, 0, r * k, k));
  check_values<bf16>("dropped in place reduce_scatter", ops::narrow(dropped, 0, r * k, k),
                     [&](int64_t e) { return fold(ReduceOp::sum, n, r * k + e); });
}

// Ranks may differ in placement: even ranks in place, odd ranks out of place.
BOOST_AUTO_TEST_CASE(reduce_scatter_placement_may_differ_across_ranks) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int64_t k : {3, 5000}) {
    Tensor in = make<float>(n * k, [&](int64_t j) { return v_sum(r, j); });
    Tensor out = r % 2 == 0 ? ops::narrow(in, 0, r * k, k) : Tensor::empty({k});
    c->reduce_scatter(in, out)->wait();
    check_values<float>("mixed placement k " + std::to_string(k), out,
                        [&](int64_t e) { return fold(ReduceOp::sum, n, r * k + e); });
  }
}

// A rank that passes another size than its peers: the exchange sees chunks of the wrong
// length and every rank throws on wait() (a chunk too long is MPI's truncation error; one
// too short, triad's), instead of reducing garbage.
BOOST_AUTO_TEST_CASE(in_place_reduce_scatter_of_mismatched_sizes_throws) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = r == 0 ? 6 : 5;
  Tensor buf = Tensor::ones({n * k});
  WorkPtr w = c->reduce_scatter(buf, ops::narrow(buf, 0, r * k, k));
  if (r == 0)
    test::check_error([&] { w->wait(); }, {"reduce_scatter", "rank 1 sent 5 elements", "this rank (0) expected 6"});
  else
    test::check_error([&] { w->wait(); }, {"reduce_scatter", "MPI_Wait"});
  c->barrier();
}

// all_reduce, all_gather, all_to_all and broadcast on communicators of 1, 2 and 3 ranks
// (the world split by rank mod 3, as above), from one element to more than a message MPI
// sends eagerly: small calls run by exchange on every communicator here, all_reduce's
// large ones by MPI_Iallreduce on 3 ranks (Note [Collectives by exchange]).
BOOST_AUTO_TEST_CASE_TEMPLATE(collectives_on_1_2_3_ranks, T, AllTypes) {
  auto sub = comm()->split(comm()->rank() % 3, 0);
  const int n = sub->size(), r = sub->rank();
  const std::string on = " on " + std::to_string(n) + " ranks";
  for (int64_t len : {1, 5, 3001, 40000}) {
    for (ReduceOp op : kOps) {
      Tensor t = make<T>(len, [&](int64_t j) { return v_for(op, r, j); });
      sub->all_reduce(t, op)->wait();
      check_values<T>(std::string("all_reduce") + on + " " + name(op) + " len " + std::to_string(len), t,
                      [&](int64_t j) { return fold(op, n, j); });
    }
  }
  for (int64_t k : {1, 5, 3001}) {
    const std::string ks = on + " k " + std::to_string(k);
    Tensor in = make<T>(k, [&](int64_t i) { return v_mm(r, i); });
    Tensor out = make<T>(n * k, [](int64_t) { return -100; });
    sub->all_gather(in, out)->wait();
    check_values<T>("all_gather" + ks, out, [&](int64_t j) { return v_mm(int(j / k), j % k); });
    Tensor buf = make<T>(n * k, [&](int64_t j) { return j / k == r ? v_mm(r, j % k) : -100; });
    sub->all_gather(ops::narrow(buf, 0, r * k, k), buf)->wait();
    check_values<T>("all_gather in place" + ks, buf, [&](int64_t j) { return v_mm(int(j / k), j % k); });

    Tensor a = make<T>(n * k, [&](int64_t j) { return route_code(n, r, int(j / k), j % k); });
    Tensor b = make<T>(n * k, [](int64_t) { return -100; });
    sub->all_to_all(a, b)->wait();
    check_values<T>("all_to_all" + ks, b, [&](int64_t j) { return route_code(n, int(j / k), r, j % k); });
    check_values<T>("all_to_all leaves its input" + ks, a,
                    [&](int64_t j) { return route_code(n, r, int(j / k), j % k); });
    sub->all_to_all(a, a)->wait();
    check_values<T>("all_to_all in place" + ks, a, [&](int64_t j) { return route_code(n, int(j / k), r, j % k); });
  }
  for (int root = 0; root < n; ++root) {
    for (int64_t len : {1, 3001}) {
      Tensor t = make<T>(len, [&](int64_t j) { return r == root ? v_mm(root, j) : -100; });
      sub->broadcast(t, root)->wait();
      check_values<T>("broadcast" + on + " from " + std::to_string(root) + " len " + std::to_string(len), t,
                      [&](int64_t j) { return v_mm(root, j); });
    }
  }
}

// Values whose floating-point sum depends on the order of the terms (large and small
// magnitudes, both signs): every rank ends with the same bits, those of rank 0's value
// + rank 1's + ... + rank n−1's, combined left to right in T (bf16/f16: each sum of two
// rounded from float), which is Note [All-reduce by exchange]'s order. max and min of
// signed zeros, whose result depends on operand order, agree bitwise across ranks too.
template <class T>
void check_same_bits_on_every_rank(const std::string& what, const Tensor& t) {
  auto c = comm();
  Tensor all = Tensor::empty({c->size() * t.numel()}, t.dtype());
  c->all_gather(t, all)->wait();
  for (int q = 0; q < c->size(); ++q)
    BOOST_CHECK_MESSAGE(
        std::memcmp(all.data<T>() + q * t.numel(), t.data<T>(), t.nbytes()) == 0,
        what << " (" << dtype_name(t.dtype()) << "): rank " << q << " ended with other bits than rank " << c->rank());
}

using FloatTypes = boost::mpl::list<float, double, bf16, f16>;

// The unit roundoff of T: one addition's result is within u·|result| of the exact sum.
template <class T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, bf16>)
    return 0x1p-8;
  else if constexpr (std::is_same_v<T, f16>)
    return 0x1p-11;
  else
    return std::numeric_limits<T>::epsilon() / 2;
}

// Up to kExchangeMaxRanks ranks the exchange adds the n buffers in rank order, so the sum
// has the bits of the rank-order sum. Above, libnbc adds in an order of its own: the bits
// are the same on every rank, and within the rounding of n − 1 additions of the
// rank-order sum.
BOOST_AUTO_TEST_CASE_TEMPLATE(all_reduce_adds_in_rank_order_on_every_rank, T, FloatTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  auto x = [](int q, int64_t j) {
    const double magnitude = (q + j) % 3 == 0 ? 3.0e4 : 1.0;
    return ((q + j) % 2 ? -1 : 1) * magnitude * (1 + 0.0137 * double((7 * j + q) % 11));
  };
  const int64_t len = 255;  // 510 to 2040 bytes: by exchange on up to kExchangeMaxRanks ranks
  Tensor t = make<T>(len, [&](int64_t j) { return x(r, j); });
  c->all_reduce(t)->wait();
  Tensor expected = Tensor::empty({len}, t.dtype());
  std::vector<double> magnitude(size_t(len), 0.0);  // the sum of the terms' magnitudes
  for (int64_t j = 0; j < len; ++j) {
    T acc = from_double<T>(x(0, j));
    magnitude[size_t(j)] = std::abs(to_double(acc));
    for (int q = 1; q < n; ++q) {
      const T term = from_double<T>(x(q, j));
      magnitude[size_t(j)] += std::abs(to_double(term));
      if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
        acc = T(float(acc) + float(term));
      else
        acc = acc + term;
    }
    expected.data<T>()[j] = acc;
  }
  if (n <= parallel::detail::kExchangeMaxRanks) {
    BOOST_CHECK_MESSAGE(std::memcmp(t.data<T>(), expected.data<T>(), t.nbytes()) == 0,
                        "all_reduce sum (" << dtype_name(t.dtype()) << ", rank " << r << "/" << n
                                           << ") differs from the rank-order sum");
  } else {
    // Each of the two sums is within (n − 1)·u·Σ|terms| of the exact one.
    const double bound = 2 * (n - 1) * unit_roundoff<T>();
    int64_t bad = 0;
    for (int64_t j = 0; j < len; ++j)
      bad += !(std::abs(to_double(t.data<T>()[j]) - to_double(expected.data<T>()[j])) <= bound * magnitude[size_t(j)]);
    BOOST_CHECK_MESSAGE(bad == 0, "all_reduce sum (" << dtype_name(t.dtype()) << ", rank " << r << "/" << n
                                                     << "): " << bad << " of " << len
                                                     << " elements further from the rank-order sum than rounding");
  }
  check_same_bits_on_every_rank<T>("all_reduce sum", t);

  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    Tensor z = make<T>(len, [&](int64_t j) { return (r + j) % 2 ? -0.0 : 0.0; });
    c->all_reduce(z, op)->wait();
    check_values<T>(std::string("all_reduce of signed zeros ") + name(op), z, [](int64_t) { return 0.0; });
    check_same_bits_on_every_rank<T>(std::string("all_reduce of signed zeros ") + name(op), z);
  }
}

// Ranks may differ in placement (all_to_all: where it runs by exchange): even ranks in
// place, odd ranks out of place.
BOOST_AUTO_TEST_CASE(all_gather_and_all_to_all_placement_may_differ_across_ranks) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int64_t k : {3, 5000}) {
    const std::string ks = " k " + std::to_string(k);
    Tensor gathered = make<float>(n * k, [&](int64_t j) { return j / k == r ? v_mm(r, j % k) : -100; });
    Tensor in = r % 2 == 0 ? ops::narrow(gathered, 0, r * k, k) : make<float>(k, [&](int64_t i) { return v_mm(r, i); });
    c->all_gather(in, gathered)->wait();
    check_values<float>("all_gather mixed placement" + ks, gathered,
                        [&](int64_t j) { return v_mm(int(j / k), j % k); });

    if (!parallel::detail::all_to_all_by_exchange(n, size_t(n * k) * sizeof(float))) continue;
    Tensor a = make<float>(n * k, [&](int64_t j) { return route_code(n, r, int(j / k), j % k); });
    Tensor b = r % 2 == 0 ? a : Tensor::empty({n * k});
    c->all_to_all(a, b)->wait();
    check_values<float>("all_to_all mixed placement" + ks, b,
                        [&](int64_t j) { return route_code(n, int(j / k), r, j % k); });
  }
}

// Every collective in flight together beside the user's own messages (tag 0 on the same
// communicator), completed in reverse order; then in-place all_to_all (whose chunks move
// into place on completion) by test() and by a dropped Work.
BOOST_AUTO_TEST_CASE(collectives_in_flight_with_user_messages) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor got = Tensor::full({300}, -1), sent = Tensor::full({300}, r);
  WorkPtr user_recv = c->recv(got, prev, 0);
  const int64_t k = 700;
  Tensor small = make<float>(9, [&](int64_t j) { return v_sum(r, j); });
  Tensor large = make<double>(30000, [&](int64_t j) { return v_sum(r, j); });
  Tensor ag_out = Tensor::empty({n * k}, DType::i32);
  Tensor ag_in = make<int32_t>(k, [&](int64_t i) { return v_mm(r, i); });
  Tensor a2a = make<f16>(n * k, [&](int64_t j) { return double(r * n + j / k); });
  Tensor bc = make<int64_t>(k, [&](int64_t j) { return r == n - 1 ? j : -1; });
  Tensor rs = make<float>(n * k, [&](int64_t j) { return v_sum(r, j); });
  std::vector<WorkPtr> works;
  works.push_back(c->all_reduce(small));
  works.push_back(c->all_gather(ag_in, ag_out));
  works.push_back(c->all_to_all(a2a, a2a));
  works.push_back(c->broadcast(bc, n - 1));
  works.push_back(c->reduce_scatter(rs, ops::narrow(rs, 0, r * k, k)));
  works.push_back(c->all_reduce(large));
  WorkPtr user_send = c->send(sent, next, 0);
  for (auto w = works.rbegin(); w != works.rend(); ++w) (*w)->wait();
  user_send->wait();
  user_recv->wait();
  check_values<float>("user message beside the collectives", got, [&](int64_t) { return prev; });
  check_values<float>("in flight small all_reduce", small, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });
  check_values<double>("in flight large all_reduce", large, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });
  check_values<int32_t>("in flight all_gather", ag_out, [&](int64_t j) { return v_mm(int(j / k), j % k); });
  check_values<f16>("in flight in place all_to_all", a2a, [&](int64_t j) { return double(int(j / k) * n + r); });
  check_values<int64_t>("in flight broadcast", bc, [&](int64_t j) { return j; });
  check_values<float>("in flight reduce_scatter", ops::narrow(rs, 0, r * k, k),
                      [&](int64_t i) { return fold(ReduceOp::sum, n, r * k + i); });

  Tensor polled = make<double>(n * 4099, [&](int64_t j) { return double(r * n + j / 4099); });
  WorkPtr w = c->all_to_all(polled, polled);
  while (!w->test()) {
  }
  BOOST_TEST(w->test());
  w->wait();
  check_values<double>("in place all_to_all by test()", polled,
                       [&](int64_t j) { return double(int(j / 4099) * n + r); });

  Tensor dropped = make<bf16>(n * 33, [&](int64_t j) { return double(r * n + j / 33); });
  c->all_to_all(dropped, dropped);
  check_values<bf16>("dropped in place all_to_all", dropped, [&](int64_t j) { return double(int(j / 33) * n + r); });
}

// Rank 0 passes more elements than its peers (broadcast: fewer, as root): the exchange
// sees messages of the wrong length, and the ranks that receive them throw on wait() (a
// message too short is triad's error, naming the peer and both counts; one too long,
// MPI's truncation) instead of hanging or returning garbage. Above kExchangeMaxRanks these
// calls are libnbc's, and mismatched sizes are an error MPI need not detect (it may hang),
// as the communicator's documentation says.
BOOST_AUTO_TEST_CASE(mismatched_sizes_throw_on_wait) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  if (n == 1 || n > parallel::detail::kExchangeMaxRanks) return;
  const int64_t k = r == 0 ? 6 : 5;
  const std::string short_message = "rank 1 sent 5 elements, this rank (0) expected 6";
  auto expect = [&](const char* call, WorkPtr w) {
    if (r == 0)
      test::check_error([&] { w->wait(); }, {call, short_message});
    else
      test::check_error([&] { w->wait(); }, {call, "MPI_Wait", "truncated"});
    c->barrier();
  };
  expect("all_reduce", c->all_reduce(Tensor::ones({k})));
  Tensor gathered = Tensor::zeros({n * k});
  expect("all_gather", c->all_gather(ops::narrow(gathered, 0, r * k, k), gathered));
  expect("all_to_all", c->all_to_all(Tensor::ones({n * k}), Tensor::zeros({n * k})));
  Tensor bc = Tensor::ones({r == 0 ? 5 : 6});
  WorkPtr w = c->broadcast(bc, 0);
  if (r == 0)
    w->wait();
  else
    test::check_error([&] { w->wait(); },
                      {"broadcast", "rank 0 sent 5 elements, this rank (" + std::to_string(r) + ") expected 6"});
  c->barrier();
  // The communicator is still in step.
  Tensor t = Tensor::ones({8});
  c->all_reduce(t)->wait();
  check_values<float>("after mismatched sizes", t, [&](int64_t) { return n; });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_gather, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int64_t k : {1, 1023}) {
    Tensor in = make<T>(k, [&](int64_t i) { return v_mm(r, i); });
    Tensor out = make<T>(n * k, [](int64_t) { return -100; });
    c->all_gather(in, out)->wait();
    const std::string what = "all_gather k " + std::to_string(k);
    check_values<T>(what, out, [&](int64_t j) { return v_mm(int(j / k), j % k); });

    // In place: input is chunk rank() of the output.
    Tensor buf = make<T>(n * k, [](int64_t) { return -100; });
    Tensor chunk = ops::narrow(buf, 0, r * k, k);
    std::copy_n(in.data<T>(), k, chunk.data<T>());
    c->all_gather(chunk, buf)->wait();
    check_values<T>(what + " in place", buf, [&](int64_t j) { return v_mm(int(j / k), j % k); });
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_to_all, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int64_t k : {1, 3, 1023}) {
    Tensor in = make<T>(n * k, [&](int64_t j) { return route_code(n, r, int(j / k), j % k); });
    Tensor out = make<T>(n * k, [](int64_t) { return -100; });
    c->all_to_all(in, out)->wait();
    const std::string what = "all_to_all k " + std::to_string(k);
    // Chunk q of the output came from rank q's chunk r.
    check_values<T>(what, out, [&](int64_t j) { return route_code(n, int(j / k), r, j % k); });
    c->all_to_all(in, in)->wait();  // in place
    check_values<T>(what + " in place", in, [&](int64_t j) { return route_code(n, int(j / k), r, j % k); });
  }
}

// all_to_allv: rank `from` sends rank `to` (from + 2 to) % 4 elements (0 for some pairs,
// rank 0 to itself among them), element i of that chunk route_code(n, from, to, i).
int64_t v_count(int from, int to) { return (from + 2 * to) % 4; }

BOOST_AUTO_TEST_CASE_TEMPLATE(all_to_allv, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (const int64_t scale : {int64_t(1), int64_t(300)}) {  // a large call: counts times 300
    std::vector<int64_t> sent, received;
    for (int q = 0; q < n; ++q) sent.push_back(scale * v_count(r, q)), received.push_back(scale * v_count(q, r));
    auto layout = [&](const std::vector<int64_t>& counts, int64_t j) {  // (chunk, element) of j
      int q = 0;
      while (j >= counts[size_t(q)]) j -= counts[size_t(q++)];
      return std::pair(q, j);
    };
    int64_t in_n = 0, out_n = 0;
    for (int q = 0; q < n; ++q) in_n += sent[size_t(q)], out_n += received[size_t(q)];
    const Tensor in = make<T>(in_n, [&](int64_t j) {
      const auto [q, i] = layout(sent, j);
      return route_code(n, r, q, i);
    });
    const Tensor out = make<T>(out_n, [](int64_t) { return -100; });
    c->all_to_allv(in, sent, out, received)->wait();
    check_values<T>("all_to_allv scale " + std::to_string(scale), out, [&](int64_t j) {
      const auto [q, i] = layout(received, j);
      return route_code(n, q, r, i);
    });
  }
}

// Bad counts are named on the rank that passed them, before anything is sent; counts that
// disagree with a peer's throw on wait(), naming the peer and both counts.
BOOST_AUTO_TEST_CASE(all_to_allv_checks_its_counts) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const std::vector<int64_t> ones(size_t(n), 1);
  test::check_error([&] { c->all_to_allv(Tensor::ones({n}), ones, Tensor::zeros({n + 1}), ones); },
                    {"all_to_allv", "receive counts", "summing to " + std::to_string(n)});
  test::check_error([&] { c->all_to_allv(Tensor::ones({1}), {1}, Tensor::zeros({1}), {1}); },
                    {"all_to_allv", "send counts must be " + std::to_string(n) + " counts"});
  const Tensor both = Tensor::ones({2 * n});
  test::check_error([&] { c->all_to_allv(ops::narrow(both, 0, 0, n), ones, ops::narrow(both, 0, 1, n), ones); },
                    {"all_to_allv", "overlaps"});
  if (n == 1) return;
  // Rank 0 expects 2 elements from rank 1, which sends it 1.
  std::vector<int64_t> received = ones;
  if (r == 0) received[1] = 2;
  const Tensor out = Tensor::zeros({r == 0 ? n + 1 : n});
  WorkPtr w = c->all_to_allv(Tensor::ones({n}), ones, out, received);
  if (r == 0)
    test::check_error([&] { w->wait(); }, {"all_to_allv", "rank 1 sent 1 elements, this rank (0) expected 2"});
  else
    w->wait();
  c->barrier();
}

// all_to_all of more than 1 MiB: by MPI_Ialltoall above 2 ranks, by exchange on 2.
BOOST_AUTO_TEST_CASE(large_all_to_all) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = 70000;
  Tensor in = make<float>(n * k, [&](int64_t j) { return route_code(n, r, int(j / k), j % k); });
  Tensor out = Tensor::empty({n * k});
  c->all_to_all(in, out)->wait();
  check_values<float>("large all_to_all", out, [&](int64_t j) { return route_code(n, int(j / k), r, j % k); });
  c->all_to_all(in, in)->wait();
  check_values<float>("large all_to_all in place", in, [&](int64_t j) { return route_code(n, int(j / k), r, j % k); });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(broadcast, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int root : {n - 1, 1 % n, 0}) {
    for (int64_t len : {1, 1001}) {
      Tensor t = make<T>(len, [&](int64_t j) { return r == root ? v_mm(root, j) : -100; });
      c->broadcast(t, root)->wait();
      check_values<T>("broadcast from " + std::to_string(root) + " len " + std::to_string(len), t,
                      [&](int64_t j) { return v_mm(root, j); });
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(send_recv_ring, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t len : {1, 1001}) {
    Tensor out = make<T>(len, [&](int64_t j) { return v_mm(r, j); });
    Tensor in = make<T>(len, [](int64_t) { return -100; });
    WorkPtr rw = c->recv(in, prev, 5);
    WorkPtr sw = c->send(out, next, 5);
    sw->wait();
    rw->wait();
    check_values<T>("ring recv len " + std::to_string(len), in, [&](int64_t j) { return v_mm(prev, j); });
    // The same exchange as one operation, waited on, then completed by test().
    Tensor grouped = make<T>(len, [](int64_t) { return -100; });
    c->send_recv(out, next, grouped, prev, 6)->wait();
    check_values<T>("send_recv len " + std::to_string(len), grouped, [&](int64_t j) { return v_mm(prev, j); });
    Tensor polled = make<T>(len, [](int64_t) { return -100; });
    WorkPtr w = c->send_recv(out, next, polled, prev);
    while (!w->test()) {
    }
    BOOST_TEST(w->test());
    check_values<T>("send_recv by test() len " + std::to_string(len), polled, [&](int64_t j) { return v_mm(prev, j); });
    // A tag each way (a pipeline's activation out, another micro-batch's gradient in): the
    // message sent under tag 20 + r is received under the sender's tag.
    Tensor tagged = make<T>(len, [](int64_t) { return -100; });
    c->send_recv(out, next, 20 + r, tagged, prev, 20 + prev)->wait();
    check_values<T>("send_recv with two tags len " + std::to_string(len), tagged,
                    [&](int64_t j) { return v_mm(prev, j); });
  }
}

BOOST_AUTO_TEST_CASE(send_recv_between_halves_of_one_buffer) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  // Disjoint parts of one storage may be sent from and received into in one call.
  Tensor buf = make<float>(8, [&](int64_t j) { return j < 4 ? 10 * r + j : -1; });
  c->send_recv(ops::narrow(buf, 0, 0, 4), (r + 1) % n, ops::narrow(buf, 0, 4, 4), (r + n - 1) % n, 7)->wait();
  const int prev = (r + n - 1) % n;
  check_values<float>("send_recv within one buffer", buf,
                      [&](int64_t j) { return j < 4 ? 10 * r + j : 10 * prev + j - 4; });
}

BOOST_AUTO_TEST_CASE(tags_select_messages) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Two messages to the same rank, received in the opposite order by tag.
  Tensor a = Tensor::full({4}, 10 + r, DType::f32), b = Tensor::full({4}, 20 + r, DType::f32);
  Tensor ra = Tensor::zeros({4}), rb = Tensor::zeros({4});
  WorkPtr wb = c->recv(rb, prev, 2), wa = c->recv(ra, prev, 1);
  WorkPtr s1 = c->send(a, next, 1), s2 = c->send(b, next, 2);
  for (WorkPtr* w : {&s1, &s2, &wb, &wa}) (*w)->wait();
  check_values<float>("tag 1", ra, [&](int64_t) { return 10 + prev; });
  check_values<float>("tag 2", rb, [&](int64_t) { return 20 + prev; });
}

BOOST_AUTO_TEST_CASE(many_in_flight_waited_in_order) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = 513;
  std::vector<Tensor> sums;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 6; ++i) {
    sums.push_back(make<float>(1001 + i, [&](int64_t j) { return v_sum(r, j + i); }));
    works.push_back(c->all_reduce(sums.back()));
  }
  Tensor rs_in = make<double>(n * k, [&](int64_t j) { return v_sum(r, j); }), rs_out = Tensor::empty({k}, DType::f64);
  works.push_back(c->reduce_scatter(rs_in, rs_out));
  Tensor ag_in = make<bf16>(k, [&](int64_t i) { return v_mm(r, i); }), ag_out = Tensor::empty({n * k}, DType::bf16);
  works.push_back(c->all_gather(ag_in, ag_out));
  Tensor bc = make<int64_t>(77, [&](int64_t j) { return r == n - 1 ? j * 3 : -1; });
  works.push_back(c->broadcast(bc, n - 1));
  Tensor mx = make<float>(999, [&](int64_t j) { return v_mm(r, j); });
  works.push_back(c->all_reduce(mx, ReduceOp::max));
  for (auto& w : works) w->wait();
  for (int i = 0; i < 6; ++i)
    check_values<float>("in flight all_reduce " + std::to_string(i), sums[i],
                        [&](int64_t j) { return fold(ReduceOp::sum, n, j + i); });
  check_values<double>("in flight reduce_scatter", rs_out,
                       [&](int64_t i) { return fold(ReduceOp::sum, n, r * k + i); });
  check_values<bf16>("in flight all_gather", ag_out, [&](int64_t j) { return v_mm(int(j / k), j % k); });
  check_values<int64_t>("in flight broadcast", bc, [&](int64_t j) { return j * 3; });
  check_values<float>("in flight all_reduce max", mx, [&](int64_t j) { return fold(ReduceOp::max, n, j); });
}

BOOST_AUTO_TEST_CASE(test_polls_to_completion_and_unwaited_work_completes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  Tensor t = make<float>(4096, [&](int64_t j) { return v_sum(r, j); });
  WorkPtr w = c->all_reduce(t);
  int64_t polls = 0;
  while (!w->test()) ++polls;
  BOOST_TEST(w->test());  // stays complete
  w->wait();              // and wait() after completion returns at once
  check_values<float>("all_reduce by test()", t, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });

  // A Work dropped without wait() completes in its destructor.
  Tensor u = make<float>(1001, [&](int64_t j) { return v_sum(r, j); });
  c->all_reduce(u);
  check_values<float>("dropped Work", u, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });
}

BOOST_AUTO_TEST_CASE(views_with_dimensions_of_size_1_are_contiguous) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  // A row of a matrix, (1, 6) with strides (6, 1) at offset 12: contiguous whatever the
  // stride of its size-1 dimension.
  Tensor m = ops::reshape(make<float>(24, [&](int64_t j) { return v_sum(r, j); }), {4, 6});
  Tensor row = ops::narrow(m, 0, 2, 1);
  c->all_reduce(row)->wait();
  check_values<float>("row all_reduce", m,
                      [&](int64_t j) { return j / 6 == 2 ? fold(ReduceOp::sum, n, j) : v_sum(r, j); });
  Tensor in = ops::narrow(Tensor::zeros({3, 6}), 0, 1, 1);
  WorkPtr rw = c->recv(in, (r + n - 1) % n);
  c->send(row, (r + 1) % n)->wait();
  rw->wait();
  check_values<float>("row recv", in, [&](int64_t j) { return fold(ReduceOp::sum, n, 12 + j); });
}

BOOST_AUTO_TEST_CASE(empty_tensors) {
  auto c = comm();
  Tensor e = Tensor::empty({0}, DType::f32);
  c->all_reduce(e)->wait();
  c->all_gather(e, Tensor::empty({0}, DType::f32))->wait();
  c->reduce_scatter(Tensor::empty({0}, DType::f32), e)->wait();
  c->broadcast(e, 0)->wait();
}

BOOST_AUTO_TEST_CASE(bf16_and_f16_sums_round_per_combination) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  // Inexact values: the result is within (n-1) roundings of the exact sum of the inputs.
  auto x = [](int rr, int64_t j) { return 1.0 + 0.0137 * (rr + 1) + 0.00071 * (j % 97); };
  for (DType dt : {DType::bf16, DType::f16}) {
    const double u = dt == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    Tensor t = Tensor::empty({4099}, dt);
    Tensor in64 = Tensor::empty({n, 4099}, DType::f64);  // every rank's rounded inputs
    for (int rr = 0; rr < n; ++rr) {
      Tensor row = make<double>(4099, [&](int64_t j) { return x(rr, j); });
      Tensor rounded = ops::to(ops::to(row, dt), DType::f64);
      std::copy_n(rounded.data<double>(), 4099, in64.data<double>() + rr * 4099);
      if (rr == r) t = ops::to(row, dt);
    }
    c->all_reduce(t)->wait();
    Tensor got = ops::to(t, DType::f64);
    double worst = 0;
    for (int64_t j = 0; j < 4099; ++j) {
      double exact = 0;
      for (int rr = 0; rr < n; ++rr) exact += in64.data<double>()[rr * 4099 + j];
      worst = std::max(worst, std::abs(got.data<double>()[j] - exact) / exact);
    }
    BOOST_TEST(worst <= (n - 1) * u, dtype_name(dt) << " sum relative error " << worst << " > (n-1)·u");
    // Every rank holds the same result.
    Tensor same = ops::clone(t), mn = ops::clone(t);
    c->all_reduce(same, ReduceOp::max)->wait();
    c->all_reduce(mn, ReduceOp::min)->wait();
    BOOST_TEST(test::max_abs_diff(same, mn) == 0, dtype_name(dt) << " sums differ across ranks");
  }
}

BOOST_AUTO_TEST_CASE(split_halves_reversed_key) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int half = n / 2, color = r < half ? 0 : 1;
  auto sub = c->split(color, -r);
  const int lo = color * half, hi = lo + half;  // world ranks [lo, hi) in this half
  BOOST_TEST(sub->size() == half);
  BOOST_TEST(sub->rank() == hi - 1 - r);
  Tensor mine = Tensor::full({1}, r, DType::i64), all = Tensor::empty({half}, DType::i64);
  sub->all_gather(mine, all)->wait();
  check_values<int64_t>("split members, reversed", all, [&](int64_t q) { return hi - 1 - q; });
  Tensor s = Tensor::full({3}, r, DType::f64);
  sub->all_reduce(s)->wait();
  check_values<double>("split sum", s, [&](int64_t) { return double(hi - 1 + lo) * half / 2; });

  // Both halves and the world in flight together.
  Tensor w = Tensor::full({5}, 1, DType::i32), h = Tensor::full({5}, 1, DType::i32);
  WorkPtr ww = c->all_reduce(w), wh = sub->all_reduce(h);
  wh->wait();
  ww->wait();
  check_values<int32_t>("world sum", w, [&](int64_t) { return n; });
  check_values<int32_t>("half sum", h, [&](int64_t) { return half; });

  auto node = std::dynamic_pointer_cast<MpiCommunicator>(c)->split_by_node();
  BOOST_TEST(node->size() == n);  // one machine
  BOOST_TEST(node->rank() == r);
}

BOOST_AUTO_TEST_CASE(argument_errors_throw_before_communicating) {
  auto c = comm();
  const int n = c->size();
  using test::check_error;
  Tensor m = Tensor::zeros({4, 6});
  check_error([&] { c->all_reduce(ops::transpose(m, 0, 1)); }, {"all_reduce", "contiguous", "(6, 4)"});
  check_error([&] { c->send(ops::narrow(m, 1, 2, 1), 0); }, {"send", "contiguous", "(4, 1)"});
  check_error([&] { c->reduce_scatter(Tensor::zeros({n * 3 + 1}), Tensor::zeros({3})); },
              {"reduce_scatter", "(" + std::to_string(n * 3 + 1) + ",)", "(3,)"});
  check_error([&] { c->reduce_scatter(Tensor::zeros({n * 3}), Tensor::zeros({3}, DType::f64)); },
              {"reduce_scatter", "dtype", "f32", "f64"});
  check_error([&] { c->all_gather(Tensor::zeros({3}), Tensor::zeros({n * 3 + 2})); },
              {"all_gather", "(3,)", "(" + std::to_string(n * 3 + 2) + ",)"});
  check_error([&] { c->all_gather(Tensor::zeros({3}, DType::bf16), Tensor::zeros({n * 3})); },
              {"all_gather", "bf16", "f32"});
  if (n > 1)  // on one rank every size is a multiple of size()
    check_error([&] { c->all_to_all(Tensor::zeros({n * 2 + 1}), Tensor::zeros({n * 2 + 1})); },
                {"all_to_all", "size() * k"});
  check_error([&] { c->broadcast(Tensor::zeros({2}), n); }, {"broadcast", "root " + std::to_string(n)});
  check_error([&] { c->send(Tensor::zeros({2}), -1); }, {"send", "destination -1"});
  check_error([&] { c->recv(Tensor::zeros({2}), n); }, {"recv", "source " + std::to_string(n)});
  check_error([&] { c->send(Tensor::zeros({2}), 0, -3); }, {"send", "tag -3"});
  check_error([&] { c->send_recv(Tensor::zeros({2}), 0, Tensor::zeros({2}), -1); }, {"send_recv", "source -1"});
  check_error([&] { c->send_recv(Tensor::zeros({2}), n, Tensor::zeros({2}), 0); },
              {"send_recv", "destination " + std::to_string(n)});
  check_error([&] { c->send_recv(ops::narrow(m, 1, 2, 1), 0, Tensor::zeros({2}), 0); },
              {"send_recv", "send tensor", "contiguous"});
  check_error([&] { c->send_recv(Tensor::zeros({2}), 0, Tensor::zeros({2}), 0, -4); }, {"send_recv", "tag -4"});
  check_error([&] { c->split(-1, 0); }, {"split", "color"});
  check_error([&] { c->all_reduce(Tensor()); }, {"all_reduce", "undefined"});
  // Overlapping buffers other than the in-place forms.
  Tensor buf = Tensor::zeros({n * 4});
  if (n > 1) {
    const int other = (c->rank() + 1) % n;
    check_error([&] { c->reduce_scatter(buf, ops::narrow(buf, 0, other * 4, 4)); }, {"reduce_scatter", "overlaps"});
    check_error([&] { c->all_gather(ops::narrow(buf, 0, other * 4, 4), buf); }, {"all_gather", "overlaps"});
  }
  check_error([&] { c->all_to_all(ops::narrow(buf, 0, 0, n * 2), ops::narrow(buf, 0, 1, n * 2)); },
              {"all_to_all", "overlaps"});
  check_error([&] { c->send_recv(ops::narrow(buf, 0, 0, 3), 0, ops::narrow(buf, 0, 2, 3), 0); },
              {"send_recv", "recv tensor", "overlaps send tensor"});
  // The communicator is still in step after the errors.
  Tensor t = Tensor::ones({8});
  c->all_reduce(t)->wait();
  check_values<float>("after errors", t, [&](int64_t) { return n; });
}

BOOST_AUTO_TEST_CASE(recv_of_the_wrong_size_throws_on_wait) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const std::string from = "from rank " + std::to_string(prev);
  Tensor out = Tensor::ones({3}), in = Tensor::zeros({5});
  WorkPtr rw = c->recv(in, prev, 9);
  WorkPtr sw = c->send(out, next, 9);
  sw->wait();
  test::check_error([&] { rw->wait(); },
                    {"recv", "expected 5", from, "tag 9", "f32 tensor of shape (5,)", "received 3"});
  // The error names the shape of up to 4 dimensions, and the dimensions of a larger one.
  Tensor in4 = Tensor::zeros({1, 2, 1, 3}, DType::f64), in5 = Tensor::zeros({1, 1, 1, 1, 5}, DType::i32);
  rw = c->recv(in4, prev, 4);
  c->send(Tensor::zeros({5}, DType::f64), next, 4)->wait();
  test::check_error([&] { rw->wait(); }, {"expected 6", "f64 tensor of shape (1, 2, 1, 3)", "received 5"});
  rw = c->recv(in5, prev, 5);
  c->send(Tensor::zeros({4}, DType::i32), next, 5)->wait();
  test::check_error([&] { rw->wait(); }, {"expected 5", "i32 tensor of 5 dimensions", "received 4"});
  // Dropped without wait(), a receive of the wrong size completes in its destructor, which
  // does not throw.
  rw = c->recv(in, prev, 6);
  c->send(out, next, 6)->wait();
  rw.reset();
  // send_recv checks its receive the same way, and names itself.
  WorkPtr both = c->send_recv(out, next, in, prev, 8);
  test::check_error([&] { both->wait(); }, {"send_recv", "expected 5", from, "tag 8", "received 3"});
}

BOOST_AUTO_TEST_CASE(send_and_recv_keep_their_storages_until_complete) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Tensors over borrowed bytes, whose release says when the last reference went away.
  std::vector<float> sent(7, float(r)), received(7, -1.0f);
  bool sent_released = false, received_released = false;
  auto borrow = [](std::vector<float>& bytes, bool& released) {
    auto storage = std::make_shared<Storage>(bytes.data(), bytes.size() * sizeof(float), Device::cpu(),
                                             [&released](void*) { released = true; });
    return Tensor::from_storage(std::move(storage), {int64_t(bytes.size())}, {1}, 0, DType::f32);
  };
  Tensor in = borrow(received, received_released), out = borrow(sent, sent_released);
  WorkPtr rw = c->recv(in, prev, 3);
  WorkPtr sw = c->send(out, next, 3);
  in = Tensor();
  out = Tensor();
  BOOST_TEST(!received_released);  // the Work holds it while the message is in flight
  rw->wait();
  BOOST_TEST(received_released);  // and lets go on completion
  sw.reset();                     // a send dropped without wait() completes in its destructor
  BOOST_TEST(sent_released);
  check_values<float>("recv into borrowed bytes", Tensor::from_vector(received, {7}), [&](int64_t) { return prev; });

  // send_recv holds both until both are complete.
  sent_released = received_released = false;
  std::fill(received.begin(), received.end(), -1.0f);
  in = borrow(received, received_released);
  out = borrow(sent, sent_released);
  WorkPtr both = c->send_recv(out, next, in, prev, 4);
  in = Tensor();
  out = Tensor();
  BOOST_TEST(!received_released);
  BOOST_TEST(!sent_released);
  both->wait();
  BOOST_TEST(received_released);
  BOOST_TEST(sent_released);
  check_values<float>("send_recv into borrowed bytes", Tensor::from_vector(received, {7}),
                      [&](int64_t) { return prev; });
}

// Note [Collective deadline] for calls that complete on a device (NCCL's): completed calls
// are dropped, and the oldest still in flight past the timeout is aborted and reported.
BOOST_AUTO_TEST_CASE(device_calls_past_the_deadline_are_aborted_and_named) {
  auto group = std::make_shared<parallel::WatchedGroup>();
  group->axis = "dp";
  group->world_ranks = {3, 5};
  group->rank = 1;
  bool first_done = false, second_done = false;
  int first_aborts = 0, second_aborts = 0;
  parallel::watch_device_call({.group = group,
                               .call = "ncclAllReduce",
                               .seq = 7,
                               .done = [&] { return first_done; },
                               .abort = [&] { ++first_aborts; }});
  parallel::watch_device_call(
      {.group = group, .call = "ncclAllGather", .seq = 8, .done = [&] { return second_done; }, .abort = [&] { ++second_aborts; }});

  BOOST_TEST(parallel::poll_device_calls(3600.0) == "");  // in flight, not yet overdue
  BOOST_TEST(first_aborts + second_aborts == 0);
  first_done = true;
  const std::string report = parallel::poll_device_calls(0.0);  // the first is dropped, the second overdue
  BOOST_TEST(first_aborts == 0);
  BOOST_TEST(second_aborts == 1);
  const std::string rank = "rank " + std::to_string(parallel::world_rank()) + ": ";
  BOOST_TEST(report.starts_with(rank + "error: [comm_timeout] ncclAllGather #8 on the dp group has been in flight on "
                                       "the device 0.0 s (comm_timeout 0.0 s). The group: 2 ranks, world ranks 3 5; "
                                       "this is its rank 1."),
             report);
  BOOST_TEST(report.ends_with("aborting the job.\n"), report);

  parallel::watch_device_call(
      {.group = group, .call = "ncclBroadcast", .seq = 9, .done = [] { return true; }, .abort = [] {}});
  BOOST_TEST(parallel::poll_device_calls(3600.0) == "");  // the overdue one is still there, but not past an hour
  second_done = true;
  BOOST_TEST(parallel::poll_device_calls(0.0) == "");  // none left
  BOOST_TEST(second_aborts == 1);
}

BOOST_AUTO_TEST_SUITE_END()  // test_collectives_mpi
