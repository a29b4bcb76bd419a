// MpiCommunicator's staged path (Note [Staged collectives]) without a GPU: a fake
// DeviceStaging over host memory stands in for CUDA's. "Device" tensors are host bytes
// labelled cuda:0 (a borrowed Storage), its copies are memcpy, and it counts every call.
// So the CPU suite checks what the staged path does on every rank: the closed-form values
// of test_collectives_mpi for every collective, in-place forms, which copies each call
// makes (inputs to the host at the call, the result back only once the operation has
// completed, in wait() or test()), dropped Works, a failed receive copying nothing back,
// and the argument errors. tests/cuda/test_mpi_device_cuda_mpi.cpp runs the same on a GPU.
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <functional>

#include "parallel/mpi_communicator.h"
#include "parallel/runtime.h"
#include "parallel/staged_collectives.h"
#include "support/check.h"
#include "support/collective_values.h"
#include "tensor/ops.h"

BOOST_AUTO_TEST_SUITE(test_staged_collectives_mpi)

using namespace triad;
using namespace triad::parallel;
using test::fold;
using test::v_for;
using test::v_mm;
using test::v_sum;

namespace {

struct FakeStaging;

class FakeCopy final : public DeviceCopy {
 public:
  explicit FakeCopy(FakeStaging& s) : s_(s) {}
  bool done() override { return true; }
  void order_current() override;
  void wait() override {}

 private:
  FakeStaging& s_;
};

struct FakeStaging final : DeviceStaging {
  int orders = 0, host_copies = 0, device_copies = 0, order_currents = 0;

  Tensor host_buffer(int64_t numel, DType dtype) override { return Tensor::empty({numel}, dtype); }
  void order_after_current(Device device) override {
    BOOST_TEST(device.is_cuda());
    ++orders;
  }
  void to_host(const Tensor& dst, const Tensor& src) override {
    BOOST_TEST((dst.device().is_cpu() && src.device().is_cuda() && dst.nbytes() == src.nbytes()));
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    ++host_copies;
  }
  std::unique_ptr<DeviceCopy> to_host_async(const Tensor& dst, const Tensor& src) override {
    to_host(dst, src);
    return std::make_unique<FakeCopy>(*this);
  }
  std::unique_ptr<DeviceCopy> to_device(const Tensor& dst, const Tensor& src) override {
    BOOST_TEST((dst.device().is_cuda() && src.device().is_cpu() && dst.nbytes() == src.nbytes()));
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    ++device_copies;
    return std::make_unique<FakeCopy>(*this);
  }
};

void FakeCopy::order_current() { ++s_.order_currents; }

FakeStaging g_staging;

// The fake staging registered for cuda while this suite runs (no test here asks the tensor
// layer for a cuda device, which would install the real one).
struct StagingFixture {
  StagingFixture() { register_device_staging(DeviceType::cuda, &g_staging); }
  ~StagingFixture() { register_device_staging(DeviceType::cuda, nullptr); }
};

CommunicatorPtr comm() { return world(); }

// The staging calls made since the last reset.
struct Calls {
  int orders, to_host, to_device, order_currents;
};
Calls calls() {
  const Calls c{g_staging.orders, g_staging.host_copies, g_staging.device_copies, g_staging.order_currents};
  g_staging.orders = g_staging.host_copies = g_staging.device_copies = g_staging.order_currents = 0;
  return c;
}
void check_calls(const std::string& what, int orders, int to_host, int to_device, int order_currents) {
  const Calls c = calls();
  BOOST_TEST(c.orders == orders, what << ": order_after_current");
  BOOST_TEST(c.to_host == to_host, what << ": copies to the host");
  BOOST_TEST(c.to_device == to_device, what << ": copies to the device");
  BOOST_TEST(c.order_currents == order_currents, what << ": current streams ordered");
}

// A 1-d "device" tensor of n elements of T, element j = f(j).
template <class T>
Tensor make(int64_t n, const std::function<double(int64_t)>& f) {
  const size_t bytes = size_t(n) * sizeof(T);
  auto storage = std::make_shared<Storage>(new char[bytes > 0 ? bytes : 1], bytes, Device::cuda(0),
                                           [](void* p) { delete[] static_cast<char*>(p); });
  Tensor t = Tensor::from_storage(std::move(storage), {n}, {1}, 0, dtype_of<T>::value);
  T* p = static_cast<T*>(t.raw_data());
  for (int64_t j = 0; j < n; ++j) p[j] = from_double<T>(f(j));
  return t;
}

template <class T>
void check_values(const std::string& what, const Tensor& t, const std::function<double(int64_t)>& expected) {
  const T* p = static_cast<const T*>(t.raw_data());
  int64_t bad = 0, first = -1;
  for (int64_t j = 0; j < t.numel(); ++j)
    if (to_double(p[j]) != expected(j) && bad++ == 0) first = j;
  BOOST_CHECK_MESSAGE(bad == 0, what << " (" << dtype_name(dtype_of<T>::value) << ", rank " << comm()->rank() << "/"
                                     << comm()->size() << "): " << bad << " of " << t.numel()
                                     << " elements wrong; first at " << first << ": got "
                                     << (first >= 0 ? to_double(p[first]) : 0.0) << ", expected "
                                     << (first >= 0 ? expected(first) : 0.0));
}

using Types = boost::mpl::list<float, bf16, int64_t>;

}  // namespace

// (The suite reopened: its fixture is defined above.)
BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE(test_staged_collectives_mpi, *boost::unit_test::fixture<StagingFixture>())

BOOST_AUTO_TEST_CASE_TEMPLATE(all_reduce, T, Types) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  calls();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    Tensor t = make<T>(1001, [&](int64_t j) { return v_for(op, r, j); });
    WorkPtr w = c->all_reduce(t, op);
    check_calls("all_reduce, started", 1, 1, 0, 0);
    // The result reaches the device only once the operation has completed.
    check_values<T>("all_reduce before wait", t, [&](int64_t j) { return v_for(op, r, j); });
    w->wait();
    check_calls("all_reduce, waited", 0, 0, 1, 1);
    check_values<T>("all_reduce", t, [&](int64_t j) { return fold(op, n, j); });
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_scatter, T, Types) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = 513;
  calls();
  Tensor in = make<T>(n * k, [&](int64_t j) { return v_sum(r, j); });
  Tensor out = make<T>(k, [](int64_t) { return -100; });
  c->reduce_scatter(in, out)->wait();
  check_calls("reduce_scatter", 1, 1, 1, 1);
  check_values<T>("reduce_scatter", out, [&](int64_t i) { return fold(ReduceOp::sum, n, r * k + i); });
  check_values<T>("reduce_scatter leaves its input", in, [&](int64_t j) { return v_sum(r, j); });

  // In place: only chunk rank() of the device buffer changes.
  Tensor buf = make<T>(n * k, [&](int64_t j) { return v_sum(r, j); });
  c->reduce_scatter(buf, ops::narrow(buf, 0, r * k, k))->wait();
  check_calls("reduce_scatter in place", 1, 1, 1, 1);
  check_values<T>("reduce_scatter in place", buf,
                  [&](int64_t j) { return j / k == r ? fold(ReduceOp::sum, n, j) : v_sum(r, j); });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_gather, T, Types) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = 513;
  calls();
  Tensor in = make<T>(k, [&](int64_t i) { return v_mm(r, i); });
  Tensor out = make<T>(n * k, [](int64_t) { return -100; });
  c->all_gather(in, out)->wait();
  check_calls("all_gather", 1, 1, 1, 1);
  check_values<T>("all_gather", out, [&](int64_t j) { return v_mm(int(j / k), j % k); });

  Tensor buf = make<T>(n * k, [&](int64_t j) { return j / k == r ? v_mm(r, j % k) : -100; });
  c->all_gather(ops::narrow(buf, 0, r * k, k), buf)->wait();
  check_calls("all_gather in place", 1, 1, 1, 1);
  check_values<T>("all_gather in place", buf, [&](int64_t j) { return v_mm(int(j / k), j % k); });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_to_all, T, Types) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = 37;
  auto code = [n](int from, int to, int64_t i) { return double(from * n + to + 64 * (i % 2)); };
  calls();
  Tensor in = make<T>(n * k, [&](int64_t j) { return code(r, int(j / k), j % k); });
  Tensor out = make<T>(n * k, [](int64_t) { return -100; });
  c->all_to_all(in, out)->wait();
  check_values<T>("all_to_all", out, [&](int64_t j) { return code(int(j / k), r, j % k); });
  c->all_to_all(in, in)->wait();
  check_values<T>("all_to_all in place", in, [&](int64_t j) { return code(int(j / k), r, j % k); });
  check_calls("all_to_all twice", 2, 2, 2, 2);
}

// Rank `from` sends rank `to` (from + to) % 3 rows of 5 elements (none for some pairs).
BOOST_AUTO_TEST_CASE_TEMPLATE(all_to_allv, T, Types) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int64_t k = 5;
  auto code = [n](int from, int to, int64_t i) { return double(from * n + to + 64 * (i % 2)); };
  std::vector<int64_t> sent, received;
  int64_t in_n = 0, out_n = 0;
  for (int q = 0; q < n; ++q) {
    sent.push_back((r + q) % 3 * k), received.push_back((q + r) % 3 * k);
    in_n += sent.back(), out_n += received.back();
  }
  // Element j of a buffer of chunks of `counts`: its chunk and its place in it.
  auto at = [n](const std::vector<int64_t>& counts, int64_t j) {
    int q = 0;
    while (q < n - 1 && j >= counts[size_t(q)]) j -= counts[size_t(q++)];
    return std::pair(q, j);
  };
  calls();
  Tensor in = make<T>(in_n, [&](int64_t j) {
    const auto [q, i] = at(sent, j);
    return code(r, q, i);
  });
  Tensor out = make<T>(out_n, [](int64_t) { return -100; });
  c->all_to_allv(in, sent, out, received)->wait();
  check_values<T>("all_to_allv", out, [&](int64_t j) {
    const auto [q, i] = at(received, j);
    return code(q, r, i);
  });
  check_calls("all_to_allv", 1, 1, 1, 1);
}

BOOST_AUTO_TEST_CASE(broadcast_copies_only_what_moves) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  for (int root = 0; root < n; ++root) {
    calls();
    Tensor t = make<float>(1001, [&](int64_t j) { return r == root ? v_mm(root, j) : -100; });
    c->broadcast(t, root)->wait();
    // The root sends its tensor and receives nothing; the others only receive.
    if (r == root)
      check_calls("broadcast at the root", 1, 1, 0, 0);
    else
      check_calls("broadcast elsewhere", 1, 0, 1, 1);
    check_values<float>("broadcast from " + std::to_string(root), t, [&](int64_t j) { return v_mm(root, j); });
  }
}

BOOST_AUTO_TEST_CASE(send_recv_ring) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  calls();
  Tensor out = make<double>(1001, [&](int64_t j) { return v_mm(r, j); });
  Tensor in = make<double>(1001, [](int64_t) { return -100; });
  WorkPtr rw = c->recv(in, prev, 5);
  WorkPtr sw = c->send(out, next, 5);
  sw->wait();
  rw->wait();
  check_calls("a send and a receive", 2, 1, 1, 1);
  check_values<double>("ring", in, [&](int64_t j) { return v_mm(prev, j); });
  // send_recv of device tensors is staged as the same send and receive.
  Tensor grouped = make<double>(1001, [](int64_t) { return -100; });
  calls();
  c->send_recv(out, next, grouped, prev, 6)->wait();
  check_calls("send_recv", 2, 1, 1, 1);
  check_values<double>("send_recv ring", grouped, [&](int64_t j) { return v_mm(prev, j); });
}

BOOST_AUTO_TEST_CASE(test_copies_back_once_and_dropped_work_completes) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  calls();
  Tensor t = make<float>(4096, [&](int64_t j) { return v_sum(r, j); });
  WorkPtr w = c->all_reduce(t);
  while (!w->test()) {
  }
  BOOST_TEST(w->test());
  check_calls("completed by test()", 1, 1, 1, 0);
  check_values<float>("all_reduce by test()", t, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });
  w->wait();  // orders the current stream; copies nothing more
  check_calls("wait() after test()", 0, 0, 0, 1);
  w.reset();
  check_calls("destroyed after wait()", 0, 0, 0, 0);

  Tensor u = make<float>(1001, [&](int64_t j) { return v_sum(r, j); });
  c->all_reduce(u);  // the Work is dropped at once: its destructor waits
  check_calls("dropped Work", 1, 1, 1, 1);
  check_values<float>("dropped Work", u, [&](int64_t j) { return fold(ReduceOp::sum, n, j); });
}

BOOST_AUTO_TEST_CASE(failed_recv_copies_nothing_back) {
  auto c = comm();
  const int n = c->size(), r = c->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor out = make<float>(3, [](int64_t) { return 1; });
  Tensor in = make<float>(5, [](int64_t) { return -1; });
  calls();
  WorkPtr rw = c->recv(in, prev, 9);
  WorkPtr sw = c->send(out, next, 9);
  sw->wait();
  test::check_error([&] { rw->wait(); }, {"recv", "expected 5", "received 3"});
  rw->wait();
  BOOST_TEST(rw->test());
  rw.reset();
  check_calls("a failed receive", 2, 1, 0, 0);
  check_values<float>("after the failed recv", in, [](int64_t) { return -1; });
}

BOOST_AUTO_TEST_CASE(argument_errors) {
  auto c = comm();
  const int n = c->size();
  using test::check_error;
  calls();
  check_error([&] { c->reduce_scatter(make<float>(n * 3, [](int64_t) { return 0; }), Tensor::zeros({3})); },
              {"reduce_scatter", "same device", "cpu", "cuda:0"});
  check_error([&] { c->all_gather(Tensor::zeros({3}, DType::f64), make<float>(n * 3, [](int64_t) { return 0; })); },
              {"all_gather", "dtype"});
  check_error([&] { c->broadcast(make<float>(2, [](int64_t) { return 0; }), n); }, {"broadcast", "root"});
  check_calls("rejected calls", 0, 0, 0, 0);

  // Without a staging for its device type, a device tensor is refused.
  register_device_staging(DeviceType::cuda, nullptr);
  check_error([&] { c->all_reduce(make<float>(2, [](int64_t) { return 0; })); },
              {"all_reduce", "cuda:0", "the MPI communicator takes cpu tensors"});
  register_device_staging(DeviceType::cuda, &g_staging);
}

BOOST_AUTO_TEST_SUITE_END()  // test_staged_collectives_mpi
