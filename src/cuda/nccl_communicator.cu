// NcclCommunicator (see the header for the contract). Arguments are checked on the calling
// rank before anything is enqueued (collective_checks.h), so a bad call throws there
// instead of leaving the other ranks in a collective that never matches.
//
// State shared by a communicator and its Works: the NCCL communicator itself (destroyed
// when the last of them goes), and the batch of point-to-point operations not yet issued.
// Each issued operation (a collective, or a batch of sends and receives) records one
// event on the communication stream; its Works wait on that event, and while comm_timeout
// is on the watchdog polls it (Note [Collective deadline], parallel/watchdog.h).
#include <nccl.h>

#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/nccl_communicator.h"
#include "cuda/nccl_types.h"
#include "cuda/runtime.h"
#include "cuda/stream.h"
#include "parallel/collective_checks.h"
#include "parallel/runtime.h"
#include "parallel/watchdog.h"

namespace triad::cuda {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
    case DType::i8:
      return ncclInt8;
  }
  TRIAD_ASSERT_MSG(false, "unknown dtype " << int(t));
  return ncclFloat32;
}

ncclRedOp_t nccl_op(parallel::ReduceOp op) {
  switch (op) {
    case parallel::ReduceOp::sum:
      return ncclSum;
    case parallel::ReduceOp::max:
      return ncclMax;
    case parallel::ReduceOp::min:
      return ncclMin;
  }
  TRIAD_ASSERT_MSG(false, "unknown ReduceOp " << int(op));
  return ncclSum;
}

namespace {

using parallel::CommunicatorPtr;
using parallel::ReduceOp;
using parallel::Work;
using parallel::WorkPtr;

// One issued operation: its completion event (shared with the watchdog, which must not
// keep the storages alive) and the storages it reads or writes.
struct Issued {
  explicit Issued(int device) : done(std::make_shared<Event>(device)) {}
  std::shared_ptr<Event> done;
  std::vector<std::shared_ptr<Storage>> keep;
  bool enqueued = false;
};

// The world rank of each rank of `group`, in group order (for comm_timeout's report).
std::vector<int> world_ranks(parallel::Communicator& group) {
  Tensor ranks = Tensor::empty({int64_t(group.size())}, DType::i32);
  Tensor mine = Tensor::empty({1}, DType::i32);
  const int32_t me = parallel::world_rank();
  std::memcpy(mine.raw_data(), &me, sizeof me);
  group.all_gather(mine, ranks)->wait();
  std::vector<int> out(size_t(group.size()));
  std::memcpy(out.data(), ranks.raw_data(), out.size() * sizeof(int32_t));
  return out;
}

struct P2P {
  bool send;
  Tensor t;
  int peer;
};

struct State : std::enable_shared_from_this<State> {
  ncclComm_t comm = nullptr;
  int device = 0, rank = 0, size = 1;
  cudaStream_t stream = nullptr;
  std::shared_ptr<parallel::WatchedGroup> watched = std::make_shared<parallel::WatchedGroup>();
  uint64_t calls = 0;  // operations issued on this communicator
  std::vector<P2P> pending;               // sends and receives not yet issued
  std::shared_ptr<Issued> pending_batch;  // the Issued they will share

  ~State() {
    if (!comm) return;
    // Unwinding after an error: do not wait for ranks that may never come.
    if (std::uncaught_exceptions() > 0)
      ncclCommAbort(comm);
    else
      ncclCommDestroy(comm);
  }

  [[noreturn]] void fail(ncclResult_t r, const char* call) const {
    const std::string msg = std::string(ncclGetErrorString(r)) + ": " + ncclGetLastError(comm);
    detail::throw_error("NCCL", msg.c_str(), call, __FILE__, __LINE__);
  }

  void check(ncclResult_t r, const char* call) const {
    if (r != ncclSuccess && r != ncclInProgress) fail(r, call);
  }

  void check_async() const {
    ncclResult_t r = ncclSuccess;
    TRIAD_NCCL_CHECK(ncclCommGetAsyncError(comm, &r));
    check(r, "asynchronous NCCL error");
  }

  // The communication stream waits for the current stream; t is used on it.
  void prepare(Issued& op, const std::vector<Tensor>& tensors) {
    wait_stream(stream, current_stream(device));
    for (const Tensor& t : tensors) {
      record_stream(t, stream);
      op.keep.push_back(t.storage());
    }
  }

  // `call` (a literal) names the operation in comm_timeout's report.
  void finish(Issued& op, const char* call) {
    op.done->record(stream);
    op.enqueued = true;
    ++calls;
    if (parallel::comm_timeout() <= 0) return;
    parallel::watch_device_call({
        .group = watched,
        .call = call,
        .seq = calls,
        .done =
            [done = op.done] {
              try {
                return done->query();
              } catch (const std::exception&) {
                return true;  // the error shows at the caller's next check
              }
            },
        .abort =
            [self = weak_from_this()] {
              if (const std::shared_ptr<State> s = self.lock()) ncclCommAbort(s->comm);
            },
    });
  }

  // Issues the held sends and receives as one NCCL group.
  void flush() {
    if (pending.empty()) return;
    std::vector<P2P> ops = std::move(pending);
    pending.clear();
    std::shared_ptr<Issued> batch = std::move(pending_batch);
    std::vector<Tensor> tensors;
    for (const P2P& p : ops) tensors.push_back(p.t);
    prepare(*batch, tensors);
    check(ncclGroupStart(), "ncclGroupStart");
    for (const P2P& p : ops) {
      const size_t count = size_t(p.t.numel());
      const ncclDataType_t type = nccl_type(p.t.dtype());
      if (p.send)
        check(ncclSend(p.t.raw_data(), count, type, p.peer, comm, stream), "ncclSend");
      else
        check(ncclRecv(p.t.raw_data(), count, type, p.peer, comm, stream), "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    finish(*batch, "send/recv");
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<State> state, std::shared_ptr<Issued> op) : state_(std::move(state)), op_(std::move(op)) {}

  ~NcclWork() override {
    if (waited_) return;
    try {
      wait();  // orders the current stream after the operation; the host does not block
    } catch (const std::exception&) {
      // A destructor cannot report; the error shows at the next call on the communicator.
    }
  }

  void wait() override {
    DeviceGuard guard(state_->device);
    if (!op_->enqueued) state_->flush();
    op_->done->block(current_stream(state_->device));
    waited_ = true;
  }

  bool test() override {
    DeviceGuard guard(state_->device);
    if (!op_->enqueued) state_->flush();
    if (op_->done->query()) return true;
    state_->check_async();
    return false;
  }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<Issued> op_;
  bool waited_ = false;
};

class NcclCommunicator final : public parallel::Communicator {
 public:
  NcclCommunicator(CommunicatorPtr host, int device)
      : host_(std::move(host)),
        state_(std::make_shared<State>()),
        // NCCL counts are size_t, and NCCL has no tags (any tag >= 0 is accepted, unused).
        checks_(host_->rank(), host_->size(),
                parallel::DeviceRule::only(Device::cuda(device), "this NCCL communicator"),
                std::numeric_limits<int64_t>::max(), std::numeric_limits<int>::max()) {
    State& s = *state_;
    s.device = device;
    s.rank = host_->rank();
    s.size = host_->size();
    s.stream = comm_stream(device);
    DeviceGuard guard(device);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (s.rank == 0) TRIAD_NCCL_CHECK(ncclGetUniqueId(&id));
    Tensor bytes = Tensor::empty({int64_t(sizeof id)}, DType::i8);
    std::memcpy(bytes.raw_data(), &id, sizeof id);
    host_->broadcast(bytes, 0)->wait();
    std::memcpy(&id, bytes.raw_data(), sizeof id);
    TRIAD_NCCL_CHECK(ncclCommInitRank(&s.comm, s.size, id, s.rank));
    s.watched->axis = host_->axis();
    s.watched->rank = s.rank;
    s.watched->world_ranks = world_ranks(*host_);
  }

  ~NcclCommunicator() override {
    try {
      DeviceGuard guard(state_->device);
      state_->flush();  // held sends/receives: their peers are waiting for them
    } catch (const std::exception&) {
    }
  }

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string name() const override { return "nccl"; }
  void set_axis(const std::string& axis) override {
    Communicator::set_axis(axis);
    host_->set_axis(axis);
    state_->watched->axis = axis;
  }

  CommunicatorPtr split(int color, int key) override {
    {
      DeviceGuard guard(state_->device);
      state_->flush();
    }
    CommunicatorPtr part = host_->split(color, key);
    return std::make_shared<NcclCommunicator>(std::move(part), state_->device);
  }

  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override {
    checks_.all_reduce(t);
    return issue("ncclAllReduce", {t}, [&](State& s) {
      s.check(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op), s.comm,
                            s.stream),
              "ncclAllReduce");
    });
  }

  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override {
    checks_.reduce_scatter(input, output);  // NCCL takes the in-place form as it is
    const int64_t k = output.numel();
    return issue("ncclReduceScatter", {input, output}, [&](State& s) {
      s.check(ncclReduceScatter(input.raw_data(), output.raw_data(), size_t(k), nccl_type(input.dtype()), nccl_op(op),
                                s.comm, s.stream),
              "ncclReduceScatter");
    });
  }

  WorkPtr all_gather(const Tensor& input, const Tensor& output) override {
    checks_.all_gather(input, output);  // NCCL takes the in-place form as it is
    const int64_t k = input.numel();
    return issue("ncclAllGather", {input, output}, [&](State& s) {
      s.check(ncclAllGather(input.raw_data(), output.raw_data(), size_t(k), nccl_type(input.dtype()), s.comm, s.stream),
              "ncclAllGather");
    });
  }

  WorkPtr all_to_all(const Tensor& input, const Tensor& output) override {
    Tensor send = input;
    if (checks_.all_to_all(input, output)) {
      // In place: stage the input in a buffer of the communication stream's own.
      StreamGuard on_comm(state_->device, state_->stream);
      send = Tensor::empty(input.shape(), input.dtype(), input.device());
    }
    const size_t chunk = size_t(input.numel() / size()), bytes = chunk * element_size(input.dtype());
    return issue("all_to_all (ncclSend/ncclRecv)", {input, send, output}, [&](State& s) {
      if (!send.is_same(input))
        TRIAD_CUDA_CHECK(
            cudaMemcpyAsync(send.raw_data(), input.raw_data(), input.nbytes(), cudaMemcpyDeviceToDevice, s.stream));
      const ncclDataType_t type = nccl_type(input.dtype());
      const char* from = static_cast<const char*>(send.raw_data());
      char* to = static_cast<char*>(output.raw_data());
      s.check(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < s.size; ++r) {
        s.check(ncclSend(from + r * bytes, chunk, type, r, s.comm, s.stream), "ncclSend");
        s.check(ncclRecv(to + r * bytes, chunk, type, r, s.comm, s.stream), "ncclRecv");
      }
      s.check(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  // One NCCL group of a send and a receive per peer with elements to move (counts agree
  // both ways, so a message of 0 elements is left out on both sides).
  WorkPtr all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                      const std::vector<int64_t>& recv_counts) override {
    checks_.all_to_allv(input, send_counts, output, recv_counts);
    const size_t element = element_size(input.dtype());
    return issue("all_to_allv (ncclSend/ncclRecv)", {input, output}, [&](State& s) {
      const ncclDataType_t type = nccl_type(input.dtype());
      const char* from = static_cast<const char*>(input.raw_data());
      char* to = static_cast<char*>(output.raw_data());
      size_t sent = 0, received = 0;  // elements before peer r's chunks
      s.check(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < s.size; ++r) {
        const size_t out = size_t(send_counts[size_t(r)]), in = size_t(recv_counts[size_t(r)]);
        if (out > 0) s.check(ncclSend(from + sent * element, out, type, r, s.comm, s.stream), "ncclSend");
        if (in > 0) s.check(ncclRecv(to + received * element, in, type, r, s.comm, s.stream), "ncclRecv");
        sent += out;
        received += in;
      }
      s.check(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  WorkPtr broadcast(const Tensor& t, int root) override {
    checks_.broadcast(t, root);
    return issue("ncclBroadcast", {t}, [&](State& s) {
      s.check(
          ncclBroadcast(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), root, s.comm, s.stream),
          "ncclBroadcast");
    });
  }

  WorkPtr send(const Tensor& t, int dst, int tag) override {
    checks_.send(t, dst, tag);
    return hold(true, t, dst);
  }
  WorkPtr recv(const Tensor& t, int src, int tag) override {
    checks_.recv(t, src, tag);
    return hold(false, t, src);
  }
  // Both held for the same group; one Work, of the batch.
  using Communicator::send_recv;
  WorkPtr send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src, int recv_tag) override {
    checks_.send_recv(send, dst, send_tag, recv, src, recv_tag);
    // One Work for both: a Work of the receive alone would flush the batch, without the
    // send, when it is dropped.
    hold_op(false, recv, src);
    hold_op(true, send, dst);
    return batch_work();
  }

  void barrier() override {
    DeviceGuard guard(state_->device);
    if (!token_.defined()) {
      StreamGuard on_comm(state_->device, state_->stream);
      token_ = Tensor::zeros({1}, DType::f32, Device::cuda(state_->device));
    }
    auto op = std::make_shared<Issued>(state_->device);
    state_->flush();
    state_->prepare(*op, {token_});
    state_->check(
        ncclAllReduce(token_.raw_data(), token_.raw_data(), 1, ncclFloat32, ncclSum, state_->comm, state_->stream),
        "ncclAllReduce (barrier)");
    state_->finish(*op, "barrier");
    // Poll rather than block in cudaEventSynchronize: an asynchronous NCCL error (a rank
    // gone) then surfaces as an Error instead of a hang.
    while (!op->done->query()) {
      state_->check_async();
      std::this_thread::yield();
    }
  }

 private:
  // Issues a collective after the held point-to-point operations (issue order is the
  // order every rank calls in).
  template <class F>
  WorkPtr issue(const char* call, const std::vector<Tensor>& tensors, F&& enqueue) {
    DeviceGuard guard(state_->device);
    state_->flush();
    auto op = std::make_shared<Issued>(state_->device);
    state_->prepare(*op, tensors);
    enqueue(*state_);
    state_->finish(*op, call);
    return std::make_unique<NcclWork>(state_, std::move(op));
  }

  // Holds a send or receive for the next group; its Work is the batch's.
  WorkPtr hold(bool is_send, const Tensor& t, int peer) {
    hold_op(is_send, t, peer);
    return batch_work();
  }
  void hold_op(bool is_send, const Tensor& t, int peer) {
    State& s = *state_;
    if (!s.pending_batch) s.pending_batch = std::make_shared<Issued>(s.device);
    s.pending.push_back({is_send, t, peer});
  }
  WorkPtr batch_work() { return std::make_unique<NcclWork>(state_, state_->pending_batch); }

  CommunicatorPtr host_;
  std::shared_ptr<State> state_;
  parallel::CollectiveChecks checks_;
  Tensor token_;  // barrier's one element
};

}  // namespace

bool nccl_built() { return true; }

CommunicatorPtr make_nccl_communicator(const CommunicatorPtr& host, int device) {
  TRIAD_CHECK(host != nullptr, "make_nccl_communicator: no host communicator to bootstrap over");
  const int n = device_count();
  TRIAD_CHECK(n > 0, "make_nccl_communicator: no CUDA device is visible (rank " << host->rank() << ")");
  if (device < 0) device = parallel::rank_on_node() % n;
  TRIAD_CHECK(device < n,
              "make_nccl_communicator: cuda:" << device << " requested, but " << n << " CUDA device(s) are visible");
  return std::make_shared<NcclCommunicator>(host, device);
}

}  // namespace triad::cuda
