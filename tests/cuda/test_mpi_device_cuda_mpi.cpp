// Every collective of MpiCommunicator on tensors on a CUDA device (Note [Staged
// collectives]) against the closed-form values of test_collectives_mpi: rank r contributes
// v(r, j), small integers whose sums are exact in every dtype. Several ranks may share one
// GPU (device 0 for every rank when there are fewer GPUs than ranks on the node). Beyond
// the values: in-place forms stay in place on the device, inputs written by kernels just
// before the call are the ones sent, results are visible to kernels queued after wait(),
// operations in flight, test() polling, dropped Works, host and device calls mixed, the
// pinned buffers all returned, and argument errors thrown before communicating.
#define BOOST_TEST_MODULE mpi_device_cuda_mpi
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_SHARED_GPU_MPI_TEST_MAIN's
#include <boost/mpl/list.hpp>
#include <cmath>
#include <functional>

#include "cuda/gpu_test_main.h"
#include "cuda/pinned.h"
#include "cuda/runtime.h"
#include "cuda/transfer.h"
#include "parallel/mpi_communicator.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/collective_values.h"
#include "tensor/ops.h"

TRIAD_SHARED_GPU_MPI_TEST_MAIN()

using namespace triad;
using namespace triad::parallel;
using test::fold;
using test::name;
using test::v_for;
using test::v_mm;
using test::v_sum;

namespace {

CommunicatorPtr comm() { return world(); }

// A GPU of its own per rank when there are enough, else cuda:0 for all.
Device gpu() {
  const int n = cuda::device_count();
  return Device::cuda(ranks_on_node() <= n ? rank_on_node() : 0);
}

// A 1-d tensor of `n` elements on this rank's GPU, element j = f(j).
template <class T>
Tensor make(int64_t n, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dtype_of<T>::value);
  T* p = t.data<T>();
  for (int64_t j = 0; j < n; ++j) p[j] = from_double<T>(f(j));
  return cuda::to_device(t, gpu());
}

// Counts elements of the device tensor t that differ from expected(j) and reports the first.
template <class T>
void check_values(const std::string& what, const Tensor& t, const std::function<double(int64_t)>& expected) {
  BOOST_REQUIRE(t.device() == gpu());
  const Tensor host = cuda::to_host(t);
  const T* p = host.data<T>();
  int64_t bad = 0, first = -1;
  for (int64_t j = 0; j < host.numel(); ++j) {
    if (to_double(p[j]) != expected(j) && bad++ == 0) first = j;
  }
  BOOST_CHECK_MESSAGE(bad == 0, what << " (" << dtype_name(dtype_of<T>::value) << ", rank " << comm()->rank() << "/"
                                     << comm()->size() << "): " << bad << " of " << host.numel()
                                     << " elements wrong; first at " << first << ": got "
                                     << (first >= 0 ? to_double(p[first]) : 0.0) << ", expected "
                                     << (first >= 0 ? expected(first) : 0.0));
}


constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};

using AllTypes = boost::mpl::list<float, double, int64_t, bf16, f16, int32_t, int8_t>;

}  // namespace

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
    Tensor buf = make<T>(n * k, [&](int64_t j) { return j / k == r ? v_mm(r, j % k) : -100; });
    c->all_gather(ops::narrow(buf, 0, r * k, k), buf)->wait();
    check_values<T>(what + " in place", buf, [&](int64_t j) { return v_mm(int(j / k), j % k); });
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_to_all, T, AllTypes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  // Chunk q of rank s's input holds s·n + q + 64·(i % 2): at most 127, exact everywhere.
  auto code = [n](int from, int to, int64_t i) { return double(from * n + to + 64 * (i % 2)); };
  for (int64_t k : {1, 3, 1023}) {
    Tensor in = make<T>(n * k, [&](int64_t j) { return code(r, int(j / k), j % k); });
    Tensor out = make<T>(n * k, [](int64_t) { return -100; });
    c->all_to_all(in, out)->wait();
    const std::string what = "all_to_all k " + std::to_string(k);
    // Chunk q of the output came from rank q's chunk r.
    check_values<T>(what, out, [&](int64_t j) { return code(int(j / k), r, j % k); });
    c->all_to_all(in, in)->wait();  // in place
    check_values<T>(what + " in place", in, [&](int64_t j) { return code(int(j / k), r, j % k); });
  }
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

// Each rank posts its receive before its send: MPI's non-blocking calls do not deadlock.
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
  }
}

// The input is written by a kernel queued just before the call, and the result read by a
// kernel queued just after wait(), both on the compute stream: the staging copies are
// ordered between them by events, with no synchronization by the test.
BOOST_AUTO_TEST_CASE(ordered_with_the_compute_stream) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int64_t len : {int64_t(1), int64_t(1) << 22}) {
    const Tensor base = make<float>(len, [&](int64_t j) { return v_sum(r, j); });
    const Tensor t = ops::mul(base, 2.0);  // queued on the compute stream
    c->all_reduce(t)->wait();
    const Tensor doubled = ops::mul(t, 3.0);
    check_values<float>("producer and consumer kernels, len " + std::to_string(len), doubled,
                        [&](int64_t j) { return 6 * fold(ReduceOp::sum, n, j); });
  }
}

BOOST_AUTO_TEST_CASE(many_in_flight_with_host_calls_between) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = 513;
  std::vector<Tensor> sums;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 6; ++i) {
    sums.push_back(make<float>(1001 + i, [&](int64_t j) { return v_sum(r, j + i); }));
    works.push_back(c->all_reduce(sums.back()));
  }
  Tensor rs_in = make<double>(n * k, [&](int64_t j) { return v_sum(r, j); });
  Tensor rs_out = Tensor::empty({k}, DType::f64, gpu());
  works.push_back(c->reduce_scatter(rs_in, rs_out));
  // A host call in between, on the same communicator.
  Tensor host = Tensor::full({77}, r + 1, DType::i32);
  works.push_back(c->all_reduce(host));
  Tensor ag_in = make<bf16>(k, [&](int64_t i) { return v_mm(r, i); });
  Tensor ag_out = Tensor::empty({n * k}, DType::bf16, gpu());
  works.push_back(c->all_gather(ag_in, ag_out));
  Tensor bc = make<int64_t>(77, [&](int64_t j) { return r == n - 1 ? j * 3 : -1; });
  works.push_back(c->broadcast(bc, n - 1));
  for (auto& w : works) w->wait();
  for (int i = 0; i < 6; ++i)
    check_values<float>("in flight all_reduce " + std::to_string(i), sums[size_t(i)],
                        [&](int64_t j) { return fold(ReduceOp::sum, n, j + i); });
  check_values<double>("in flight reduce_scatter", rs_out,
                       [&](int64_t i) { return fold(ReduceOp::sum, n, r * k + i); });
  check_values<bf16>("in flight all_gather", ag_out, [&](int64_t j) { return v_mm(int(j / k), j % k); });
  check_values<int64_t>("in flight broadcast", bc, [&](int64_t j) { return j * 3; });
  for (int64_t j = 0; j < host.numel(); ++j) BOOST_TEST(host.data<int32_t>()[j] == n * (n + 1) / 2);
}

BOOST_AUTO_TEST_CASE(test_polls_to_completion_and_unwaited_work_completes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  Tensor t = make<float>(4096, [&](int64_t j) { return v_sum(r, j); });
  WorkPtr w = c->all_reduce(t);
  while (!w->test()) {
  }
  BOOST_TEST(w->test());  // stays complete
  w->wait();              // and wait() after completion returns at once
  check_values<float>("all_reduce by test()", t, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });

  // A Work dropped without wait() completes in its destructor, ordered before later work.
  Tensor u = make<float>(1001, [&](int64_t j) { return v_sum(r, j); });
  c->all_reduce(u);
  check_values<float>("dropped Work", u, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });
}

BOOST_AUTO_TEST_CASE(empty_tensors) {
  auto c = comm();
  Tensor e = Tensor::empty({0}, DType::f32, gpu());
  c->all_reduce(e)->wait();
  c->all_gather(e, Tensor::empty({0}, DType::f32, gpu()))->wait();
  c->reduce_scatter(Tensor::empty({0}, DType::f32, gpu()), e)->wait();
  c->broadcast(e, 0)->wait();
}

// Every pinned staging buffer goes back to the pinned allocator once its copies are done.
BOOST_AUTO_TEST_CASE(staging_buffers_are_returned) {
  auto c = comm();
  const int r = c->rank();
  const size_t before = cuda::pinned_allocator().bytes_in_use();
  for (int i = 0; i < 3; ++i) {
    Tensor t = make<float>(100000, [&](int64_t j) { return v_sum(r, j); });
    Tensor all = Tensor::empty({100000 * c->size()}, DType::f32, gpu());
    c->all_reduce(t)->wait();
    c->all_gather(t, all)->wait();
  }
  BOOST_TEST(cuda::pinned_allocator().bytes_in_use() == before);
}

BOOST_AUTO_TEST_CASE(split_halves) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int half = std::max(n / 2, 1), color = r < half ? 0 : 1;
  auto sub = c->split(color, r);
  Tensor mine = make<int64_t>(1, [&](int64_t) { return r; });
  Tensor all = Tensor::empty({sub->size()}, DType::i64, gpu());
  sub->all_gather(mine, all)->wait();
  const int lo = color * half;
  check_values<int64_t>("split members", all, [&](int64_t q) { return lo + q; });
}

BOOST_AUTO_TEST_CASE(argument_errors_throw_before_communicating) {
  auto c = comm();
  const int n = c->size();
  using test::check_error;
  Tensor m = Tensor::zeros({4, 6}, DType::f32, gpu());
  check_error([&] { c->all_reduce(ops::transpose(m, 0, 1)); }, {"all_reduce", "contiguous", "(6, 4)"});
  check_error([&] { c->reduce_scatter(Tensor::zeros({n * 3}, DType::f32, gpu()), Tensor::zeros({3})); },
              {"reduce_scatter", "same device", "cpu", "cuda"});
  check_error([&] { c->all_gather(Tensor::zeros({3}), Tensor::zeros({n * 3}, DType::f32, gpu())); },
              {"all_gather", "same device"});
  if (n > 1)  // one rank divides every count
    check_error(
        [&] {
          c->all_to_all(Tensor::zeros({n * 2 + 1}, DType::f32, gpu()), Tensor::zeros({n * 2 + 1}, DType::f32, gpu()));
        },
        {"all_to_all", "size() * k"});
  check_error([&] { c->broadcast(Tensor::zeros({2}, DType::f32, gpu()), n); },
              {"broadcast", "root " + std::to_string(n)});
  Tensor buf = Tensor::zeros({n * 4}, DType::f32, gpu());
  if (n > 1) {
    const int other = (c->rank() + 1) % n;
    check_error([&] { c->reduce_scatter(buf, ops::narrow(buf, 0, other * 4, 4)); }, {"reduce_scatter", "overlaps"});
  }
  // The communicator is still in step after the errors.
  Tensor t = Tensor::ones({8}, DType::f32, gpu());
  c->all_reduce(t)->wait();
  check_values<float>("after errors", t, [&](int64_t) { return n; });
}

BOOST_AUTO_TEST_CASE(recv_of_the_wrong_size_throws_on_wait) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor out = Tensor::ones({3}, DType::f32, gpu()), in = Tensor::full({5}, -1, DType::f32, gpu());
  WorkPtr rw = c->recv(in, prev, 9);
  WorkPtr sw = c->send(out, next, 9);
  sw->wait();
  test::check_error([&] { rw->wait(); }, {"recv", "expected 5", "received 3"});
  rw->wait();  // a failed operation copies nothing back
  check_values<float>("after the failed recv", in, [](int64_t) { return -1; });
}
