// reduce_scatter by exchange (Note [Reduce-scatter by exchange], mpi_exchange.h).
#include <cstring>

#include "parallel/mpi_check.h"
#include "parallel/mpi_exchange.h"

namespace triad::parallel::detail {

namespace {

class ExchangeReduceScatter : public ExchangeWork {
 public:
  ExchangeReduceScatter(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output, ReduceOp op,
                        bool in_place)
      : ExchangeWork("reduce_scatter", comm, int(output.numel()), input.dtype(), input, output, 2 * (size - 1)),
        op_(mpi_op(op, input.dtype())),
        rank_(rank),
        size_(size),
        own_(static_cast<const char*>(input.raw_data()) + size_t(rank) * bytes_),
        result_(static_cast<char*>(output.raw_data())),
        in_place_(in_place) {
    const int slots = in_place ? size - 1 : size - 2;
    if (slots > 0 && count_ > 0) scratch_ = scratch(int64_t(slots) * count_);
    for (int i = 0; i < size - 1; ++i) receive(receive_buffer(i), peer(i));
    const char* in = static_cast<const char*>(input.raw_data());
    for (int i = 0; i < size - 1; ++i) send(in + size_t(peer(i)) * bytes_, peer(i));
    if (size == 1 && !in_place && count_ > 0) std::memcpy(result_, own_, bytes_);  // one rank: a copy
  }

 private:
  // The i-th peer: rank() + 1 + i modulo n, so that the ranks start with different peers.
  int peer(int i) const { return (rank_ + 1 + i) % size_; }

  // Out of place the first chunk lands in the output; the others (all, in place) in
  // scratch slots.
  char* receive_buffer(int i) const {
    if (!in_place_ && i == 0) return result_;
    return scratch_ + size_t(in_place_ ? i : i - 1) * bytes_;
  }

  // Chunk i reduced into the result (which no send reads), in the order of the peers.
  void received(int i) override {
    if (count_ == 0) return;  // the empty messages only confirm that every rank passed k = 0
    if (!in_place_ && i == 0)
      reduce_local(own_, result_, op_);  // result = own op received
    else
      reduce_local(receive_buffer(i), result_, op_);
  }

  MPI_Op op_;
  int rank_, size_;
  const char* own_;  // chunk rank() of the input
  char* result_;     // the output (in place: own_)
  char* scratch_ = nullptr;
  bool in_place_;
};

}  // namespace

WorkPtr start_exchange_reduce_scatter(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                      ReduceOp op, bool in_place) {
  return start<ExchangeReduceScatter>(comm, rank, size, input, output, op, in_place);
}

}  // namespace triad::parallel::detail
