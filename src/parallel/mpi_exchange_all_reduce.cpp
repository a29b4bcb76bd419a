// all_reduce by exchange (Note [All-reduce by exchange], mpi_exchange.h).
#include <cstring>

#include "parallel/mpi_check.h"
#include "parallel/mpi_exchange.h"

namespace triad::parallel::detail {

namespace {

class ExchangeAllReduce : public ExchangeWork {
 public:
  ExchangeAllReduce(MPI_Comm comm, int rank, int size, const Tensor& t, ReduceOp op)
      : ExchangeWork("all_reduce", comm, int(t.numel()), t.dtype(), t, Tensor(), 2 * (size - 1)),
        op_(mpi_op(op, t.dtype())),
        rank_(rank),
        size_(size),
        data_(static_cast<char*>(t.raw_data())) {
    if (size > 1 && count_ > 0) slots_ = scratch(int64_t(size - 1) * count_);
    for (int i = 0; i < size - 1; ++i) receive(buffer((rank + 1 + i) % size), (rank + 1 + i) % size);
    for (int i = 0; i < size - 1; ++i) send(data_, (rank + 1 + i) % size);
  }

 private:
  // Rank q's buffer: the tensor for this rank, a scratch slot for the others.
  char* buffer(int q) const { return q == rank_ ? data_ : slots_ + size_t(q < rank_ ? q : q - 1) * bytes_; }

  // Every buffer is here and the tensor is sent: rank 0's buffer, op rank 1's, ..., op
  // rank n−1's, into rank 0's buffer, then into the tensor (on ranks other than 0).
  void finished() override {
    if (count_ == 0 || size_ == 1) return;
    char* result = buffer(0);
    for (int q = 1; q < size_; ++q) reduce_local(buffer(q), result, op_);
    if (rank_ != 0) std::memcpy(data_, result, bytes_);
  }

  MPI_Op op_;
  int rank_, size_;
  char* data_;  // the tensor
  char* slots_ = nullptr;
};

}  // namespace

WorkPtr start_exchange_all_reduce(MPI_Comm comm, int rank, int size, const Tensor& t, ReduceOp op) {
  return start<ExchangeAllReduce>(comm, rank, size, t, op);
}

}  // namespace triad::parallel::detail
