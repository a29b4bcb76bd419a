// The Work of a collective by exchange (Note [Collectives by exchange], the header):
// completes the receives in posting order, checking each one's element count, then the
// sends, and hands each step to the call's class.
#include "parallel/mpi_exchange.h"

#include <exception>
#include <iterator>

#include "parallel/mpi_check.h"
#include "parallel/watchdog.h"
#include "tensor/allocator.h"

namespace triad::parallel::detail {

ExchangeWork::ExchangeWork(const char* call, MPI_Comm comm, int count, DType dtype, const Tensor& a, const Tensor& b,
                           int messages)
    : count_(count),
      type_(mpi_type(dtype)),
      bytes_(size_t(count) * element_size(dtype)),
      call_(call),
      comm_(comm),
      dtype_(dtype),
      keep_{a.storage(), b.defined() && b.storage() != a.storage() ? b.storage() : nullptr, nullptr},
      requests_(inline_) {
  if (messages > int(std::size(inline_))) {
    spilled_.resize(size_t(messages));
    requests_ = spilled_.data();
  }
}

ExchangeWork::~ExchangeWork() {
  if (!done_ && !mpi_finalized()) abandon();
}

void ExchangeWork::settle() {
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

void ExchangeWork::receive(void* buffer, int from) {
  TRIAD_ASSERT_MSG(counts_.empty(), call_ << ": receives of the call's count after receives of their own");
  post_receive(buffer, from, count_);
}

void ExchangeWork::receive(void* buffer, int from, int count) {
  TRIAD_ASSERT_MSG(int(counts_.size()) == receives_, call_ << ": receives of their own count after the call's");
  counts_.push_back(count);
  post_receive(buffer, from, count);
}

void ExchangeWork::post_receive(void* buffer, int from, int count) {
  TRIAD_ASSERT_MSG(receives_ == posted_, call_ << ": a receive posted after a send");
  if (receives_ < int(std::size(sources_))) sources_[receives_] = from;
  ++receives_;
  check(MPI_Irecv(buffer, count, type_, from, 0, comm_, &requests_[posted_++]), "MPI_Irecv");
}

void ExchangeWork::send(const void* buffer, int to) { send(buffer, to, count_); }

void ExchangeWork::send(const void* buffer, int to, int count) {
  check(MPI_Isend(buffer, count, type_, to, 0, comm_, &requests_[posted_++]), "MPI_Isend");
}

char* ExchangeWork::scratch(int64_t elements) {
  TRIAD_ASSERT(!keep_.scratch);
  keep_.scratch = std::make_shared<Storage>(size_t(elements) * element_size(dtype_), allocator_for(Device::cpu()));
  return static_cast<char*>(keep_.scratch->data());
}

void ExchangeWork::reduce_local(const void* in, void* inout, MPI_Op op) {
  check(MPI_Reduce_local(in, inout, count_, type_, op), "MPI_Reduce_local");
}

void ExchangeWork::wait() {
  if (done_) return;
  for (; handled_ < receives_; ++handled_) {
    awaiting_peer(handled_ < int(std::size(sources_)) ? sources_[handled_] : -1);
    MPI_Status status;
    handle(handled_, MPI_Wait(&requests_[size_t(handled_)], &status), status, "MPI_Wait");
  }
  awaiting_peer(-1);
  check(MPI_Waitall(posted_ - receives_, requests_ + receives_, MPI_STATUSES_IGNORE), "MPI_Waitall");
  complete();
}

bool ExchangeWork::test() {
  if (done_) return true;
  int flag = 0;
  for (; handled_ < receives_; ++handled_) {
    MPI_Status status;
    const int rc = MPI_Test(&requests_[size_t(handled_)], &flag, &status);
    if (rc == MPI_SUCCESS && !flag) return false;
    handle(handled_, rc, status, "MPI_Test");
  }
  check(MPI_Testall(posted_ - receives_, requests_ + receives_, &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
  if (!flag) return false;
  complete();
  return true;
}

// Receive i has completed (rc): checks it and its element count, then hands it on.
void ExchangeWork::handle(int i, int rc, const MPI_Status& status, const char* how) {
  check(rc, how);
  int count = 0;
  check(MPI_Get_count(&status, type_, &count), "MPI_Get_count");
  const int expected = counts_.empty() ? count_ : counts_[size_t(i)];
  if (count != expected) {
    abandon();
    int rank = -1;
    MPI_Comm_rank(comm_, &rank);
    TRIAD_CHECK(false, call_ << ": rank " << status.MPI_SOURCE << " sent " << count << " elements, this rank (" << rank
                             << ") expected " << expected << " (every rank must pass the same sizes)");
  }
  received(i);
}

void ExchangeWork::complete() {
  finished();
  done_ = true;
  keep_ = {};
}

void ExchangeWork::check(int rc, const char* how) {
  if (rc == MPI_SUCCESS) return;
  abandon();
  const std::string name = std::string(how) + " (" + call_ + ")";
  throw_mpi_error(rc, name.c_str(), __FILE__, __LINE__);
}

void ExchangeWork::abandon() {
  done_ = true;
  new Keep(std::move(keep_));  // leaked on purpose: MPI may still write into these
}

}  // namespace triad::parallel::detail
