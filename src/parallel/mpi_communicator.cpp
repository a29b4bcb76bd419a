// MpiCommunicator over Open MPI's non-blocking collectives (see the header for the
// contract). Arguments are validated locally, before any communication
// (collective_checks.h), so a bad call throws on the rank that made it instead of leaving
// the others waiting in a mismatched collective.
#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "parallel/collective_checks.h"
#include "parallel/mpi_check.h"
#include "parallel/mpi_exchange.h"
#include "parallel/runtime.h"
#include "parallel/staged_collectives.h"
#include "parallel/watchdog.h"

namespace triad::parallel {

namespace detail {

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error code %d", code);
  std::ostringstream os;
  os << call << " failed at " << file << ":" << line << " (rank " << world_rank() << "): " << text;
  throw Error(os.str());
}

namespace {

// The user reduction ops for bf16 and f16, indexed [dtype is f16][ReduceOp]. Created on
// first use, freed by free_mpi_reduction_ops() before MPI_Finalize.
MPI_Op g_half_ops[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};

struct Sum {
  float operator()(float a, float b) const { return a + b; }
};
struct Max {
  float operator()(float a, float b) const { return a > b ? a : b; }
};
struct Min {
  float operator()(float a, float b) const { return a < b ? a : b; }
};

// Both operands to float, combined, rounded back to nearest even (bf16/f16 constructors).
template <class H, class F>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  static_assert(sizeof(H) == 2);
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  const F f;
  for (int i = 0; i < *len; ++i) b[i] = H(f(float(a[i]), float(b[i])));
}

template <class H>
void create_ops(MPI_Op* ops) {
  TRIAD_MPI(MPI_Op_create(&half_reduce<H, Sum>, 1, &ops[int(ReduceOp::sum)]), "MPI_Op_create");
  TRIAD_MPI(MPI_Op_create(&half_reduce<H, Max>, 1, &ops[int(ReduceOp::max)]), "MPI_Op_create");
  TRIAD_MPI(MPI_Op_create(&half_reduce<H, Min>, 1, &ops[int(ReduceOp::min)]), "MPI_Op_create");
}

}  // namespace

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;  // raw 2-byte elements; reductions use the user ops
    case DType::i64:
      return MPI_INT64_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i8:
      return MPI_INT8_T;
  }
  TRIAD_ASSERT_MSG(false, "unknown dtype " << int(t));
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::bf16 || t == DType::f16) {
    MPI_Op* ops = g_half_ops[t == DType::f16 ? 1 : 0];
    if (ops[0] == MPI_OP_NULL) {
      if (t == DType::f16)
        create_ops<f16>(ops);
      else
        create_ops<bf16>(ops);
    }
    return ops[int(op)];
  }
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  TRIAD_ASSERT_MSG(false, "unknown ReduceOp " << int(op));
  return MPI_OP_NULL;
}

bool mpi_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}

void free_mpi_reduction_ops() {
  for (auto& row : g_half_ops)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);  // sets op to MPI_OP_NULL
}

}  // namespace detail

using detail::mpi_finalized;
using detail::mpi_op;
using detail::mpi_type;

namespace {

// The blocks MpiWorks live in: a few freed blocks are cached per thread in front of the
// heap (malloc and free took about 150 instructions per Work, of the 650 the wrapper added
// to a small send or recv; the cache takes about 10). The cache is a plain array, never
// destroyed, so a Work freed on another thread than the one that made it, or late in a
// thread's exit, is safe; the blocks cached when a thread ends stay allocated.
struct WorkBlocks {
  void* free[4];
  int count;
};
constinit thread_local WorkBlocks t_work_blocks{};

// An MPI request in flight, holding the storages of the tensors it reads or writes (so
// their bytes outlive it), and for recv what its size check needs. A small call takes a
// microsecond or two, so a Work holds no more than it needs: no container, no
// std::function, no Tensor handle, no virtual call of its own.
class MpiWork final : public Work {
 public:
  MpiWork(const char* call, const std::shared_ptr<Storage>& a, const std::shared_ptr<Storage>& b = nullptr)
      : call_(call), keep_{a, b} {}
  ~MpiWork() override;

  static void* operator new(size_t bytes);
  static void operator delete(void* p);

  // The request of a send or recv; of send_recv, the recv's (the one `expect` checks)
  // and then the send's.
  MPI_Request* request() { return &requests_[0]; }
  MPI_Request* second_request() { return &requests_[1]; }

  // recv: on completion, check that the message had exactly `count` elements of `type`.
  // The error names `src`, `tag` and the dtype and shape of t, kept as numbers (a Tensor
  // handle would cost another reference count per call).
  void expect(const Tensor& t, MPI_Datatype type, int64_t count, int src, int tag) {
    check_count_ = true;
    expected_.type = type;
    expected_.count = count;
    expected_.src = src;
    expected_.tag = tag;
    expected_.dtype = t.dtype();
    expected_.dims = t.dim();
    for (int i = 0; i < expected_.dims && i < kShownDims; ++i) expected_.shape[i] = t.shape()[size_t(i)];
  }

  void wait() override {
    if (done_) return;
    // One MPI_Wait per request, the recv's first: on a pair of small messages MPI_Waitall
    // ran about 190 instructions more than two MPI_Waits (callgrind, 2 ranks, polling
    // included).
    if (check_count_) awaiting_peer(expected_.src);
    MPI_Status status;
    int rc = MPI_Wait(&requests_[0], &status);
    if (rc == MPI_SUCCESS && requests_[1] != MPI_REQUEST_NULL) rc = MPI_Wait(&requests_[1], MPI_STATUS_IGNORE);
    finish(rc, status, "MPI_Wait");
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Status status[2];
    const bool one = requests_[1] == MPI_REQUEST_NULL;
    const int rc = one ? MPI_Test(&requests_[0], &flag, &status[0]) : MPI_Testall(2, requests_, &flag, status);
    if (rc == MPI_SUCCESS && !flag) return false;
    if (rc == MPI_ERR_IN_STATUS) throw_in_status(status);
    finish(rc, status[0], one ? "MPI_Test" : "MPI_Testall");
    return true;
  }

 private:
  // Marks the Work complete and lets go of the storages. A request still active after a
  // failure (send_recv's send, when the recv's wait failed) may still read or write its
  // buffer, so the storages are leaked instead; the job is ending on the error.
  void release() {
    done_ = true;
    if (requests_[0] != MPI_REQUEST_NULL || requests_[1] != MPI_REQUEST_NULL) {
      new Storages(std::move(keep_));
      return;
    }
    keep_[0].reset();
    keep_[1].reset();
  }

  // status: the first request's (the recv's, where there is one).
  void finish(int rc, const MPI_Status& status, const char* how) {
    release();
    if (rc != MPI_SUCCESS) {
      const std::string name = std::string(how) + " (" + call_ + ")";
      detail::throw_mpi_error(rc, name.c_str(), __FILE__, __LINE__);
    }
    if (!check_count_) return;
    int count = 0;
    TRIAD_MPI(MPI_Get_count(&status, expected_.type, &count), "MPI_Get_count");
    if (count != expected_.count) throw_size_mismatch(count);
  }

  // MPI_Testall failed: each request's status holds its own code.
  [[gnu::cold, gnu::noinline, noreturn]] void throw_in_status(const MPI_Status* status) {
    release();
    int rc = MPI_ERR_IN_STATUS;
    for (int i = 0; i < 2 && rc == MPI_ERR_IN_STATUS; ++i)
      if (status[i].MPI_ERROR != MPI_SUCCESS && status[i].MPI_ERROR != MPI_ERR_PENDING) rc = status[i].MPI_ERROR;
    const std::string name = std::string("MPI_Testall (") + call_ + ")";
    detail::throw_mpi_error(rc, name.c_str(), __FILE__, __LINE__);
  }
  [[gnu::cold, gnu::noinline, noreturn]] void throw_size_mismatch(int count) const;

  // recv's error shows the shape of a tensor of up to this many dimensions (an attention
  // activation has 4), and only the number of dimensions of a larger one.
  static constexpr int kShownDims = 4;
  struct Expected {
    MPI_Datatype type;
    int64_t count;
    int src, tag;
    DType dtype;
    int dims;
    int64_t shape[kShownDims];
  };
  using Storages = std::array<std::shared_ptr<Storage>, 2>;

  const char* call_;  // a literal: the call's name
  // The storages themselves, not Tensor handles: a handle's storage may be repointed
  // while the operation is in flight, and the bytes MPI writes must stay allocated.
  Storages keep_;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool done_ = false;
  bool check_count_ = false;  // recv: expected_ is set
  Expected expected_;
};

constexpr size_t kWorkBlockBytes = 144;
static_assert(sizeof(MpiWork) <= kWorkBlockBytes);

void* MpiWork::operator new(size_t) {
  WorkBlocks& b = t_work_blocks;
  return b.count > 0 ? b.free[--b.count] : ::operator new(kWorkBlockBytes);
}

void MpiWork::operator delete(void* p) {
  WorkBlocks& b = t_work_blocks;
  if (b.count < int(std::size(b.free)))
    b.free[b.count++] = p;
  else
    ::operator delete(p);
}

MpiWork::~MpiWork() {
  if (done_ || (requests_[0] == MPI_REQUEST_NULL && requests_[1] == MPI_REQUEST_NULL) || mpi_finalized()) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding after an error: waiting could hang on ranks that will never join. Leak the
    // request and the buffers it may still write into; the top-level handler aborts the job.
    release();
    return;
  }
  try {
    wait();
  } catch (const std::exception&) {
    // A destructor cannot report; the buffers are released anyway.
  }
}

void MpiWork::throw_size_mismatch(int count) const {
  const Expected& e = expected_;
  std::ostringstream os;
  os << call_ << ": expected " << e.count << " elements from rank " << e.src << " (tag " << e.tag << ", "
     << dtype_name(e.dtype) << " tensor of ";
  if (e.dims <= kShownDims)
    os << "shape " << shape_str(Shape(e.shape, e.shape + e.dims));
  else
    os << e.dims << " dimensions";
  os << "), received " << count;
  throw Error(os.str());
}

// The world rank of each rank of comm, in order.
std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  TRIAD_MPI(MPI_Comm_group(comm, &group), "MPI_Comm_group");
  TRIAD_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  std::vector<int> ranks(static_cast<size_t>(size)), out(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[size_t(i)] = i;
  TRIAD_MPI(MPI_Group_translate_ranks(group, size, ranks.data(), world, out.data()), "MPI_Group_translate_ranks");
  TRIAD_MPI(MPI_Group_free(&group), "MPI_Group_free");
  TRIAD_MPI(MPI_Group_free(&world), "MPI_Group_free");
  return out;
}

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;  // freed in the destructor (everything but MPI_COMM_WORLD)
  // A duplicate of comm for the messages of the collectives by exchange (Note
  // [Collectives by exchange]), so they never match the user's receives. Always owned.
  MPI_Comm exchange = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int tag_ub = 32767;                      // the MPI standard's guaranteed minimum
  bool by_exchange = false;                // size <= kExchangeMaxRanks (Note [Collectives by exchange])
  std::optional<CollectiveChecks> checks;  // made once rank, size and tag_ub are known
  WatchedGroup watched;                    // what a wait past comm_timeout reports (watchdog.h)
  uint64_t calls = 0;                      // calls started on this communicator

  Impl(MPI_Comm c, bool own) : comm(c), owned(own) {
    TRIAD_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    TRIAD_MPI(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    TRIAD_MPI(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    void* value = nullptr;
    int flag = 0;
    TRIAD_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
    if (flag) tag_ub = *static_cast<int*>(value);
    TRIAD_MPI(MPI_Comm_dup(comm, &exchange), "MPI_Comm_dup");
    TRIAD_MPI(MPI_Comm_set_errhandler(exchange, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    by_exchange = size <= detail::kExchangeMaxRanks;
    checks.emplace(rank, size, DeviceRule::host_or_staged("the MPI communicator"), kMpiMaxCount, tag_ub);
    watched.rank = rank;
    watched.world_ranks = world_ranks_of(comm, size);
  }
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiCommunicator::~MpiCommunicator() {
  if (!impl_ || mpi_finalized()) return;
  auto free_comm = [](MPI_Comm& comm) {
    if (comm == MPI_COMM_NULL) return;
    const int rc = MPI_Comm_free(&comm);
    if (rc != MPI_SUCCESS) std::fprintf(stderr, "rank %d: warning: MPI_Comm_free failed (code %d)\n", world_rank(), rc);
  };
  free_comm(impl_->exchange);
  if (impl_->owned) free_comm(impl_->comm);
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::wrap_world() {
  int flag = 0;
  MPI_Initialized(&flag);
  TRIAD_CHECK(flag && !mpi_finalized(), "MpiCommunicator::wrap_world: MPI is not initialized (call parallel::init)");
  return std::make_shared<MpiCommunicator>(std::make_unique<Impl>(MPI_COMM_WORLD, false));
}

int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::size() const { return impl_->size; }
const void* MpiCommunicator::mpi_handle() const { return &impl_->comm; }

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  impl_->checks->split(color);
  MPI_Comm comm = MPI_COMM_NULL;
  TRIAD_MPI(MPI_Comm_split(impl_->comm, color, key, &comm), "MPI_Comm_split");
  return std::make_shared<MpiCommunicator>(std::make_unique<Impl>(comm, true));
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::split_by_node() {
  MPI_Comm comm = MPI_COMM_NULL;
  TRIAD_MPI(MPI_Comm_split_type(impl_->comm, MPI_COMM_TYPE_SHARED, impl_->rank, MPI_INFO_NULL, &comm),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  return std::make_shared<MpiCommunicator>(std::make_unique<Impl>(comm, true));
}

// Each collective checks its arguments, hands tensors on a device to the staged path
// (Note [Staged collectives]), which comes back here with host buffers, and otherwise
// calls MPI on the tensors' own memory.

WorkPtr MpiCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  impl_->checks->all_reduce(t);
  if (!t.device().is_cpu()) return staged::all_reduce(*this, t, op);
  if (detail::all_reduce_by_exchange(impl_->size, t.nbytes()))
    return watch("all_reduce", detail::start_exchange_all_reduce(impl_->exchange, impl_->rank, impl_->size, t, op));
  auto work = std::make_unique<MpiWork>("all_reduce", t.storage());
  TRIAD_MPI(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), int(t.numel()), mpi_type(t.dtype()), mpi_op(op, t.dtype()),
                           impl_->comm, work->request()),
            "MPI_Iallreduce");
  return watch("all_reduce", std::move(work));
}

WorkPtr MpiCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  const bool in_place = impl_->checks->reduce_scatter(input, output);
  if (!input.device().is_cpu()) return staged::reduce_scatter(*this, input, output, op);
  return watch("reduce_scatter", detail::start_exchange_reduce_scatter(impl_->exchange, impl_->rank, impl_->size, input, output, op, in_place));
}

WorkPtr MpiCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  const bool in_place = impl_->checks->all_gather(input, output);
  if (!input.device().is_cpu()) return staged::all_gather(*this, input, output);
  if (impl_->by_exchange)
    return watch("all_gather", detail::start_exchange_all_gather(impl_->exchange, impl_->rank, impl_->size, input, output, in_place));
  // Always in place: MPI wants MPI_IN_PLACE on all ranks or none, and ranks may differ in
  // placement, so the input is first copied into its chunk of the output.
  const int k = int(input.numel());
  if (!in_place)
    std::memcpy(static_cast<char*>(output.raw_data()) + size_t(impl_->rank) * input.nbytes(), input.raw_data(),
                input.nbytes());
  auto work = std::make_unique<MpiWork>("all_gather", output.storage());
  const MPI_Datatype type = mpi_type(input.dtype());
  TRIAD_MPI(MPI_Iallgather(MPI_IN_PLACE, k, type, output.raw_data(), k, type, impl_->comm, work->request()),
            "MPI_Iallgather");
  return watch("all_gather", std::move(work));
}

WorkPtr MpiCommunicator::all_to_all(const Tensor& input, const Tensor& output) {
  const bool same = impl_->checks->all_to_all(input, output);
  if (!input.device().is_cpu()) return staged::all_to_all(*this, input, output);
  if (detail::all_to_all_by_exchange(impl_->size, input.nbytes()))
    return watch("all_to_all", detail::start_exchange_all_to_all(impl_->exchange, impl_->rank, impl_->size, input, output, same));
  const int k = int(input.numel() / size());
  const MPI_Datatype type = mpi_type(input.dtype());
  auto work = std::make_unique<MpiWork>("all_to_all", input.storage(), output.storage());
  // In place, MPI_IN_PLACE: Open MPI's own in-place algorithm (slower than out of place
  // for large buffers, which a caller with the memory to spare can use instead).
  TRIAD_MPI(MPI_Ialltoall(same ? MPI_IN_PLACE : input.raw_data(), k, type, output.raw_data(), k, type, impl_->comm,
                          work->request()),
            "MPI_Ialltoall");
  return watch("all_to_all", std::move(work));
}

WorkPtr MpiCommunicator::all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                                     const std::vector<int64_t>& recv_counts) {
  impl_->checks->all_to_allv(input, send_counts, output, recv_counts);
  if (!input.device().is_cpu()) return staged::all_to_allv(*this, input, send_counts, output, recv_counts);
  return watch("all_to_allv", detail::start_exchange_all_to_allv(impl_->exchange, impl_->rank, impl_->size, input,
                                                                 send_counts, output, recv_counts));
}

WorkPtr MpiCommunicator::broadcast(const Tensor& t, int root) {
  impl_->checks->broadcast(t, root);
  if (!t.device().is_cpu()) return staged::broadcast(*this, t, root);
  if (impl_->by_exchange) return watch("broadcast", detail::start_exchange_broadcast(impl_->exchange, impl_->rank, impl_->size, t, root));
  auto work = std::make_unique<MpiWork>("broadcast", t.storage());
  TRIAD_MPI(MPI_Ibcast(t.raw_data(), int(t.numel()), mpi_type(t.dtype()), root, impl_->comm, work->request()),
            "MPI_Ibcast");
  return watch("broadcast", std::move(work));
}

// send and recv take the element count from their checks: a small message takes about a
// microsecond, and the wrapper's cost shows beside it.
WorkPtr MpiCommunicator::send(const Tensor& t, int dst, int tag) {
  const int64_t count = impl_->checks->send(t, dst, tag);
  if (!t.device().is_cpu()) return staged::send(*this, t, dst, tag);
  auto work = std::make_unique<MpiWork>("send", t.storage());
  TRIAD_MPI(MPI_Isend(t.raw_data(), int(count), mpi_type(t.dtype()), dst, tag, impl_->comm, work->request()),
            "MPI_Isend");
  return watch("send", std::move(work));
}

WorkPtr MpiCommunicator::recv(const Tensor& t, int src, int tag) {
  const int64_t count = impl_->checks->recv(t, src, tag);
  if (!t.device().is_cpu()) return staged::recv(*this, t, src, tag);
  const MPI_Datatype type = mpi_type(t.dtype());
  auto work = std::make_unique<MpiWork>("recv", t.storage());
  work->expect(t, type, count, src, tag);
  TRIAD_MPI(MPI_Irecv(t.raw_data(), int(count), type, src, tag, impl_->comm, work->request()), "MPI_Irecv");
  return watch("recv", std::move(work));
}

WorkPtr MpiCommunicator::send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src,
                                   int recv_tag) {
  const auto [sent, received] = impl_->checks->send_recv(send, dst, send_tag, recv, src, recv_tag);
  if (!send.device().is_cpu() || !recv.device().is_cpu())
    return Communicator::send_recv(send, dst, send_tag, recv, src, recv_tag);
  const MPI_Datatype recv_type = mpi_type(recv.dtype());
  auto work = std::make_unique<MpiWork>("send_recv", recv.storage(), send.storage());
  work->expect(recv, recv_type, received, src, recv_tag);
  TRIAD_MPI(MPI_Irecv(recv.raw_data(), int(received), recv_type, src, recv_tag, impl_->comm, work->request()),
            "MPI_Irecv");
  TRIAD_MPI(MPI_Isend(send.raw_data(), int(sent), mpi_type(send.dtype()), dst, send_tag, impl_->comm,
                      work->second_request()),
            "MPI_Isend");
  return watch("send_recv", std::move(work));
}

void MpiCommunicator::barrier() {
  const WaitWatch watched_wait(impl_->watched, "barrier", ++impl_->calls);
  TRIAD_MPI(MPI_Barrier(impl_->comm), "MPI_Barrier");
}

void MpiCommunicator::set_axis(const std::string& axis) {
  Communicator::set_axis(axis);
  impl_->watched.axis = axis;
}

WorkPtr MpiCommunicator::watch(const char* call, WorkPtr work) {
  return watched(std::move(work), impl_->watched, call, ++impl_->calls);
}

}  // namespace triad::parallel
