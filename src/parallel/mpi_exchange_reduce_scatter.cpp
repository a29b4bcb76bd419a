// reduce_scatter by exchange (Note [Reduce-scatter by exchange], the header).
#include "parallel/mpi_exchange_reduce_scatter.h"

#include <cstring>
#include <exception>
#include <vector>

#include "parallel/mpi_check.h"

namespace triad::parallel::detail {

namespace {

// One call in flight: its messages, its buffers, and how far its reductions have got.
class ExchangeReduceScatter final : public Work {
 public:
  ExchangeReduceScatter(int rank, int size, const Tensor& input, const Tensor& output, ReduceOp op, bool in_place)
      : keep_{input.storage(), output.storage(), nullptr},
        type_(mpi_type(input.dtype())),
        op_(mpi_op(op, input.dtype())),
        rank_(rank),
        size_(size),
        peers_(size - 1),
        k_(int(output.numel())),
        chunk_bytes_(size_t(k_) * element_size(input.dtype())),
        own_(static_cast<char*>(input.raw_data()) + size_t(rank) * chunk_bytes_),
        result_(static_cast<char*>(output.raw_data())),
        in_place_(in_place),
        requests_(size_t(2 * peers_), MPI_REQUEST_NULL) {
    const int slots = in_place ? peers_ : peers_ - 1;
    if (slots > 0) {
      const Tensor scratch = Tensor::empty({int64_t(slots) * k_}, input.dtype());
      keep_.scratch = scratch.storage();
      scratch_ = static_cast<char*>(scratch.raw_data());
    }
  }
  ~ExchangeReduceScatter() override;

  // Posts every receive, then every send (the peers in reduction order).
  void start(MPI_Comm comm, const Tensor& input) {
    const char* in = static_cast<const char*>(input.raw_data());
    for (int i = 0; i < peers_; ++i)
      TRIAD_MPI(MPI_Irecv(receive_buffer(i), k_, type_, peer(i), 0, comm, &requests_[size_t(i)]), "MPI_Irecv");
    for (int i = 0; i < peers_; ++i) {
      const int to = peer(i);
      TRIAD_MPI(MPI_Isend(in + size_t(to) * chunk_bytes_, k_, type_, to, 0, comm, &requests_[size_t(peers_ + i)]),
                "MPI_Isend");
    }
    if (peers_ == 0 && !in_place_ && k_ > 0) std::memcpy(result_, own_, chunk_bytes_);  // one rank: a copy
  }

  void wait() override {
    if (done_) return;
    for (; reduced_ < peers_; ++reduced_) {
      MPI_Status status;
      check(MPI_Wait(&requests_[size_t(reduced_)], &status), "MPI_Wait (reduce_scatter receive)");
      reduce(reduced_, status);
    }
    check(MPI_Waitall(peers_, requests_.data() + peers_, MPI_STATUSES_IGNORE), "MPI_Waitall (reduce_scatter sends)");
    complete();
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    for (; reduced_ < peers_; ++reduced_) {
      MPI_Status status;
      check(MPI_Test(&requests_[size_t(reduced_)], &flag, &status), "MPI_Test (reduce_scatter receive)");
      if (!flag) return false;
      reduce(reduced_, status);
    }
    check(MPI_Testall(peers_, requests_.data() + peers_, &flag, MPI_STATUSES_IGNORE),
          "MPI_Testall (reduce_scatter sends)");
    if (!flag) return false;
    complete();
    return true;
  }

 private:
  // The i-th peer: rank() + 1 + i modulo n, so that the ranks start with different peers.
  int peer(int i) const { return (rank_ + 1 + i) % size_; }

  // Out of place the first chunk lands in the output; the others (all, in place) in
  // scratch slots.
  char* receive_buffer(int i) const {
    if (!in_place_ && i == 0) return result_;
    return scratch_ + size_t(in_place_ ? i : i - 1) * chunk_bytes_;
  }

  // Receive i has completed: checks its size and reduces it into the result.
  void reduce(int i, const MPI_Status& status) {
    int count = 0;
    check(MPI_Get_count(&status, type_, &count), "MPI_Get_count");
    if (count != k_) {
      abandon();
      TRIAD_CHECK(false, "reduce_scatter: rank " << peer(i) << " sent a chunk of " << count << " elements, this rank ("
                                                 << rank_ << ") expected " << k_
                                                 << " (every rank must pass the same sizes)");
    }
    if (k_ == 0) return;  // the empty messages only confirm that every rank passed k = 0
    if (!in_place_ && i == 0)
      check(MPI_Reduce_local(own_, result_, k_, type_, op_), "MPI_Reduce_local");  // result = own op received
    else
      check(MPI_Reduce_local(receive_buffer(i), result_, k_, type_, op_), "MPI_Reduce_local");
  }

  void complete() {
    done_ = true;
    keep_ = {};
  }

  // An MPI failure: the call is over for this Work, but other messages of it may still be
  // in flight, so their buffers stay allocated (the job is about to abort).
  void check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    abandon();
    throw_mpi_error(rc, call, __FILE__, __LINE__);
  }

  void abandon() {
    done_ = true;
    new Keep(std::move(keep_));  // leaked on purpose: MPI may still write into these
  }

  // The storages, not Tensor handles: a handle's storage may be repointed while the
  // messages are in flight, and the bytes MPI reads and writes must stay allocated.
  struct Keep {
    std::shared_ptr<Storage> input, output, scratch;
  };
  Keep keep_;
  MPI_Datatype type_;
  MPI_Op op_;
  int rank_, size_, peers_;
  int k_;  // elements per chunk
  size_t chunk_bytes_;
  char* own_;     // chunk rank() of the input
  char* result_;  // the output (in place: own_)
  char* scratch_ = nullptr;
  bool in_place_;
  std::vector<MPI_Request> requests_;  // [0, peers): receives in reduction order; then the sends
  int reduced_ = 0;                    // receives reduced into the result so far
  bool done_ = false;
};

ExchangeReduceScatter::~ExchangeReduceScatter() {
  if (done_ || mpi_finalized()) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding after an error: waiting could hang on ranks that will never join. The
    // top-level handler aborts the job.
    abandon();
    return;
  }
  try {
    wait();
  } catch (const std::exception&) {
    // A destructor cannot report; wait() has kept the buffers MPI may still use.
  }
}

}  // namespace

WorkPtr start_exchange_reduce_scatter(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                      ReduceOp op, bool in_place) {
  auto work = std::make_unique<ExchangeReduceScatter>(rank, size, input, output, op, in_place);
  work->start(comm, input);
  return work;
}

}  // namespace triad::parallel::detail
