// The NCCL backend of `triad-bench collectives` (collectives_backend.h): the NCCL
// communicator (cuda/nccl_communicator.h) beside the bare NCCL calls it makes, so that the
// difference is triad's wrapper (argument checks, stream events, the allocator's
// bookkeeping), not the library. Built when CUDA and NCCL are (apps/CMakeLists.txt);
// otherwise stub/collectives_nccl.cpp stands in.
//
// - Device: the rank's GPU on its node, rank_on_node() modulo the visible devices (the
//   communicator's own choice), current while the backend lives. NCCL needs a GPU per rank.
// - The raw side has an ncclComm_t of its own over the same ranks (ncclCommInitRank from an
//   ncclUniqueId that rank 0 broadcasts over the host communicator) and a cudaStream_t of
//   its own, as nccl-tests runs.
// - Raw calls, as the communicator makes them and nccl-tests times them: ncclAllReduce and
//   ncclBroadcast in place; ncclReduceScatter and ncclAllGather on the case's buffers, whose
//   in-place layouts are NCCL's (recvbuff = sendbuff + rank * count, sendbuff = recvbuff +
//   rank * count); all_to_all as one group of an ncclSend and an ncclRecv per peer (in
//   place: the input first copied to a scratch buffer, as the communicator does, since the
//   group's transfers run in no set order); sendrecv as a group of one receive and one send.
// - synchronize() waits, as nccl-tests does, by polling: for the current stream (where the
//   staging copies run and where the communicator's Work::wait() orders its collectives)
//   and the raw stream, checking the raw communicator for asynchronous errors meanwhile.
#include <nccl.h>

#include <cstring>
#include <exception>
#include <thread>

#include "bench/collectives_backend.h"
#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/nccl_communicator.h"
#include "cuda/nccl_types.h"
#include "cuda/runtime.h"
#include "cuda/stream.h"
#include "parallel/runtime.h"
#include "tensor/error.h"

namespace triad::bench::collectives {

namespace {

// The raw calls' stream.
class Stream {
 public:
  Stream() { TRIAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }  // nothing to report from a destructor
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The raw calls' NCCL communicator over host's ranks. Collective over host. Destroyed
// with it, or aborted while an exception unwinds (as the NCCL communicator is), so that an
// error on one rank does not leave it waiting for ranks that will not come.
class RawComm {
 public:
  explicit RawComm(parallel::Communicator& host) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (host.rank() == 0) TRIAD_NCCL_CHECK(ncclGetUniqueId(&id));
    const Tensor bytes = Tensor::empty({int64_t(sizeof id)}, DType::i8);
    std::memcpy(bytes.raw_data(), &id, sizeof id);
    host.broadcast(bytes, 0)->wait();
    std::memcpy(&id, bytes.raw_data(), sizeof id);
    TRIAD_NCCL_CHECK(ncclCommInitRank(&comm_, host.size(), id, host.rank()));
  }
  ~RawComm() {  // nothing to report from a destructor
    if (std::uncaught_exceptions() > 0)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }
  RawComm(const RawComm&) = delete;
  RawComm& operator=(const RawComm&) = delete;
  ncclComm_t get() const { return comm_; }

  // Throws the error an earlier call left behind on the GPU (a peer gone, a network error).
  void check_async() const {
    ncclResult_t error = ncclSuccess;
    TRIAD_NCCL_CHECK(ncclCommGetAsyncError(comm_, &error));
    if (error != ncclSuccess)
      cuda::detail::throw_error("NCCL", ncclGetErrorString(error), "asynchronous error of the raw communicator",
                                __FILE__, __LINE__);
  }

 private:
  ncclComm_t comm_ = nullptr;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(const parallel::CommunicatorPtr& world, DType dtype, int device)
      : device_(device),
        on_device_(device),
        comm_(cuda::make_nccl_communicator(world, device)),
        raw_comm_(*world),
        dtype_(dtype),
        type_(cuda::nccl_type(dtype)) {}

  parallel::Communicator& comm() override { return *comm_; }
  Device device() const override { return Device::cuda(device_); }
  const char* library() const override { return "NCCL"; }
  const char* raw_name() const override {
    return "NCCL call the communicator makes (ncclAllReduce, ...; all_to_all and sendrecv: ncclSend/ncclRecv in "
           "a group), on an NCCL communicator and stream of its own";
  }
  const char* raw_kind() const override { return "nccl"; }
  std::string raw_in_place(Op op) const override {
    switch (op) {
      case Op::reduce_scatter:
        return "the same buffers: recvbuff = sendbuff + rank * count";
      case Op::all_gather:
        return "the same buffers: sendbuff = recvbuff + rank * count";
      case Op::all_to_all:
        return "the input copied to scratch first, as the communicator does, then the group of ncclSend/ncclRecv";
      case Op::all_reduce:
      case Op::broadcast:
      case Op::sendrecv:
        break;
    }
    return "";
  }

  std::function<void()> raw_call(const Case& c, const Buffers& b, int root) override {
    // The buffers were allocated for the current stream and are used on the raw one too.
    cuda::record_stream(b.send, stream_.get());
    cuda::record_stream(b.recv, stream_.get());
    const ncclComm_t comm = raw_comm_.get();
    const cudaStream_t stream = stream_.get();
    const ncclDataType_t type = type_;
    const size_t count = size_t(c.count);
    void* send = b.send.raw_data();
    void* recv = b.recv.raw_data();
    const int n = comm_->size(), rank = comm_->rank();
    switch (c.info->op) {
      case Op::all_reduce:
        return [=] { TRIAD_NCCL_CHECK(ncclAllReduce(recv, recv, count, type, ncclSum, comm, stream)); };
      case Op::reduce_scatter:
        return [=] { TRIAD_NCCL_CHECK(ncclReduceScatter(send, recv, count, type, ncclSum, comm, stream)); };
      case Op::all_gather:
        return [=] { TRIAD_NCCL_CHECK(ncclAllGather(send, recv, count, type, comm, stream)); };
      case Op::broadcast:
        return [=] { TRIAD_NCCL_CHECK(ncclBroadcast(recv, recv, count, type, root, comm, stream)); };
      case Op::all_to_all: {
        const size_t chunk_bytes = count * element_size(dtype_);
        Tensor scratch;  // in place: the copy of the input that the sends read
        if (c.in_place) {
          scratch = Tensor::empty(b.send.shape(), dtype_, device());
          cuda::record_stream(scratch, stream);
        }
        const char* from = static_cast<const char*>(c.in_place ? scratch.raw_data() : send);
        char* to = static_cast<char*>(recv);
        return [=] {
          if (scratch.defined())
            TRIAD_CUDA_CHECK(cudaMemcpyAsync(scratch.raw_data(), send, n * chunk_bytes, cudaMemcpyDeviceToDevice,
                                             stream));
          TRIAD_NCCL_CHECK(ncclGroupStart());
          for (int r = 0; r < n; ++r) {
            TRIAD_NCCL_CHECK(ncclSend(from + r * chunk_bytes, count, type, r, comm, stream));
            TRIAD_NCCL_CHECK(ncclRecv(to + r * chunk_bytes, count, type, r, comm, stream));
          }
          TRIAD_NCCL_CHECK(ncclGroupEnd());
        };
      }
      case Op::sendrecv: {
        const int next = next_rank(rank, n), prev = prev_rank(rank, n);
        return [=] {
          TRIAD_NCCL_CHECK(ncclGroupStart());
          TRIAD_NCCL_CHECK(ncclRecv(recv, count, type, prev, comm, stream));
          TRIAD_NCCL_CHECK(ncclSend(send, count, type, next, comm, stream));
          TRIAD_NCCL_CHECK(ncclGroupEnd());
        };
      }
    }
    return {};
  }

  void synchronize() override {
    for (const cudaStream_t stream : {cuda::current_stream(device_), stream_.get()}) {
      for (;;) {
        const cudaError_t state = cudaStreamQuery(stream);
        if (state == cudaSuccess) break;
        if (state != cudaErrorNotReady) TRIAD_CUDA_CHECK(state);
        raw_comm_.check_async();
        std::this_thread::yield();
      }
    }
  }

 private:
  int device_;
  cuda::DeviceGuard on_device_;  // first in, last out: the device is current for the rest
  parallel::CommunicatorPtr comm_;
  RawComm raw_comm_;
  Stream stream_;
  DType dtype_;
  ncclDataType_t type_;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(const parallel::CommunicatorPtr& world, DType dtype) {
  const int devices = cuda::device_count(), ranks = parallel::ranks_on_node();
  TRIAD_CHECK(devices > 0, "--comm nccl: no CUDA device is visible");
  TRIAD_CHECK(ranks <= devices, "--comm nccl: " << ranks << " ranks on this node but " << devices
                                                << " CUDA device(s) visible; NCCL needs a GPU per rank");
  return std::make_unique<NcclBackend>(world, dtype, parallel::rank_on_node() % devices);
}

}  // namespace triad::bench::collectives
