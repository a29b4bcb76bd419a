// Every collective of the NCCL communicator against closed-form values on every rank, as
// test_collectives_mpi does for MPI: rank r contributes v(r, j) = r + 1 + j % 7 (small
// integers: exact in every dtype), and each rank computes the expected result for all
// ranks. In-place forms, point-to-point rings posted receive-first, several operations in
// flight, split communicators, the barrier. Runs under mpirun with a GPU per rank;
// otherwise it reports itself skipped (gpu_test_main.h).
#define BOOST_TEST_MODULE nccl_cuda_mpi
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_GPU_MPI_TEST_MAIN's
#include <cmath>
#include <functional>

#include "cuda/gpu_test_main.h"
#include "cuda/nccl_communicator.h"
#include "cuda/transfer.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "tensor/ops.h"

TRIAD_GPU_MPI_TEST_MAIN()

using namespace triad;
using parallel::CommunicatorPtr;
using parallel::ReduceOp;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i8};

// One for the whole program, made on first use; never destroyed (a static destructor would
// run after main() has finalized MPI).
CommunicatorPtr nccl() {
  static auto* c = new CommunicatorPtr(cuda::make_nccl_communicator(parallel::world()));
  return *c;
}

Device gpu() { return Device::cuda(parallel::rank_on_node() % cuda::device_count()); }

double v(int r, int64_t j) { return double(r + 1 + j % 7); }

// n elements f(j) in dtype on this rank's GPU.
Tensor make(int64_t n, DType dt, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, DType::f64);
  for (int64_t j = 0; j < n; ++j) t.data<double>()[j] = f(j);
  return cuda::to_device(ops::to(t, dt), gpu());
}

// Every element of the device tensor t equals f(j).
void check(const Tensor& t, const std::function<double(int64_t)>& f, const std::string& what) {
  const std::vector<double> got = cuda::to_host(t).to_vector<double>();
  int64_t wrong = 0;
  for (int64_t j = 0; j < int64_t(got.size()); ++j) wrong += got[j] != f(j);
  BOOST_TEST(wrong == 0,
             what << ": " << wrong << " of " << got.size() << " elements wrong on rank " << parallel::world_rank());
}

}  // namespace

BOOST_AUTO_TEST_CASE(all_reduce_every_dtype_and_op) {
  const CommunicatorPtr c = nccl();
  const int n = c->size(), r = c->rank();
  for (DType dt : kDtypes)
    for (int64_t count : {int64_t(1), int64_t(1000), int64_t(1 << 20)}) {
      Tensor s = make(count, dt, [&](int64_t j) { return v(r, j); });
      Tensor mx = make(count, dt, [&](int64_t j) { return v(r, j); });
      Tensor mn = make(count, dt, [&](int64_t j) { return v(r, j); });
      c->all_reduce(s, ReduceOp::sum)->wait();
      c->all_reduce(mx, ReduceOp::max)->wait();
      c->all_reduce(mn, ReduceOp::min)->wait();
      // sum over ranks of (q + 1 + j % 7): at most 8 * 14 = 112, exact even in i8 and bf16.
      check(
          s, [&](int64_t j) { return double(n) * (n + 1) / 2 + double(n) * double(j % 7); },
          std::string("all_reduce sum ") + dtype_name(dt));
      check(
          mx, [&](int64_t j) { return v(n - 1, j); }, std::string("all_reduce max ") + dtype_name(dt));
      check(
          mn, [&](int64_t j) { return v(0, j); }, std::string("all_reduce min ") + dtype_name(dt));
    }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_and_all_gather) {
  const CommunicatorPtr c = nccl();
  const int n = c->size(), r = c->rank();
  const int64_t k = 1001;
  for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
    const auto sum_at = [&](int64_t j) { return double(n) * (n + 1) / 2 + double(n) * double(j % 7); };
    Tensor in = make(n * k, dt, [&](int64_t j) { return v(r, j); });
    Tensor out = Tensor::empty({k}, dt, gpu());
    c->reduce_scatter(in, out)->wait();
    check(
        out, [&](int64_t j) { return sum_at(r * k + j); }, std::string("reduce_scatter ") + dtype_name(dt));
    // In place: the output is chunk rank() of the input.
    Tensor buf = make(n * k, dt, [&](int64_t j) { return v(r, j); });
    Tensor mine = ops::narrow(buf, 0, r * k, k);
    c->reduce_scatter(buf, mine)->wait();
    check(
        mine, [&](int64_t j) { return sum_at(r * k + j); }, "reduce_scatter in place");

    Tensor part = make(k, dt, [&](int64_t j) { return v(r, j); });
    Tensor all = Tensor::empty({n * k}, dt, gpu());
    c->all_gather(part, all)->wait();
    check(
        all, [&](int64_t j) { return v(int(j / k), j % k); }, std::string("all_gather ") + dtype_name(dt));
    Tensor whole = make(n * k, dt, [&](int64_t j) { return j / k == r ? v(r, j % k) : -1.0; });
    c->all_gather(ops::narrow(whole, 0, r * k, k), whole)->wait();
    check(
        whole, [&](int64_t j) { return v(int(j / k), j % k); }, "all_gather in place");
  }
}

BOOST_AUTO_TEST_CASE(all_to_all_and_broadcast) {
  const CommunicatorPtr c = nccl();
  const int n = c->size(), r = c->rank();
  const int64_t k = 37;
  // Chunk q of rank r's input holds 100 r + q; chunk q of the output comes from rank q.
  const auto sent = [&](int from, int64_t j) { return double(100 * from + j / k) + double(j % k % 3); };
  Tensor in = make(n * k, DType::f32, [&](int64_t j) { return sent(r, j); });
  Tensor out = Tensor::empty({n * k}, DType::f32, gpu());
  c->all_to_all(in, out)->wait();
  check(
      out, [&](int64_t j) { return sent(int(j / k), r * k + j % k); }, "all_to_all");
  c->all_to_all(in, in)->wait();  // in place
  check(
      in, [&](int64_t j) { return sent(int(j / k), r * k + j % k); }, "all_to_all in place");
  for (int root = 0; root < n; ++root) {
    Tensor t = make(513, DType::bf16, [&](int64_t j) { return v(r, j); });
    c->broadcast(t, root)->wait();
    check(
        t, [&](int64_t j) { return v(root, j); }, "broadcast from " + std::to_string(root));
  }
}

// Each rank receives from the previous one before sending to the next: held and issued
// as one group, this does not deadlock.
BOOST_AUTO_TEST_CASE(send_recv_ring) {
  const CommunicatorPtr c = nccl();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor out = make(4096, DType::f32, [&](int64_t j) { return v(r, j); });
  Tensor in = Tensor::empty({4096}, DType::f32, gpu());
  const parallel::WorkPtr got = c->recv(in, prev);
  const parallel::WorkPtr sent = c->send(out, next);
  got->wait();
  sent->wait();
  check(
      in, [&](int64_t j) { return v(prev, j); }, "ring");
  Tensor grouped = Tensor::empty({4096}, DType::f32, gpu());
  c->send_recv(out, next, grouped, prev)->wait();
  check(
      grouped, [&](int64_t j) { return v(prev, j); }, "send_recv ring");
  test::check_error([&] { c->send_recv(ops::narrow(out, 0, 0, 8), next, ops::narrow(out, 0, 4, 8), prev); },
                    {"send_recv", "overlaps"});
}

// Several collectives in flight at once, waited for in reverse order.
BOOST_AUTO_TEST_CASE(operations_in_flight) {
  const CommunicatorPtr c = nccl();
  const int n = c->size(), r = c->rank();
  std::vector<Tensor> ts;
  std::vector<parallel::WorkPtr> works;
  for (int i = 0; i < 8; ++i) {
    ts.push_back(make(10000 + i, DType::f32, [&](int64_t j) { return v(r, j) * (i + 1); }));
    works.push_back(c->all_reduce(ts.back()));
  }
  while (!works.back()->test()) {
  }
  for (int i = 7; i >= 0; --i) works[size_t(i)]->wait();
  for (int i = 0; i < 8; ++i)
    check(
        ts[size_t(i)], [&](int64_t j) { return (double(n) * (n + 1) / 2 + double(n) * double(j % 7)) * (i + 1); },
        "in flight " + std::to_string(i));
}

BOOST_AUTO_TEST_CASE(split_and_barrier) {
  const CommunicatorPtr c = nccl();
  const int r = c->rank();
  const CommunicatorPtr part = c->split(r % 2, r);
  BOOST_TEST(part->name() == "nccl");
  BOOST_TEST(part->size() == (c->size() + 1 - r % 2) / 2);
  BOOST_TEST(part->rank() == r / 2);
  Tensor t = make(100, DType::i64, [&](int64_t) { return double(r); });
  part->all_reduce(t)->wait();
  double want = 0;  // the sum of the ranks of my parity
  for (int q = r % 2; q < c->size(); q += 2) want += q;
  check(
      t, [&](int64_t) { return want; }, "split all_reduce");
  part->barrier();
  c->barrier();
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw_before_communicating) {
  const CommunicatorPtr c = nccl();
  test::check_error([&] { c->all_reduce(Tensor::zeros({4})); }, {"all_reduce", "cpu", "cuda"});
  Tensor t = Tensor::zeros({4, 4}, DType::f32, gpu());
  test::check_error([&] { c->all_reduce(ops::transpose(t, 0, 1)); }, {"contiguous"});
  test::check_error([&] { c->broadcast(t, c->size()); }, {"root"});
  test::check_error([&] { c->reduce_scatter(Tensor::zeros({3}, DType::f32, gpu()), t); }, {"reduce_scatter"});
}
