// all_gather, all_to_all, all_to_allv and broadcast by exchange (Note [Collectives by exchange],
// mpi_exchange.h): the collectives that move data without combining it. The peers of
// rank r are taken in the order r + 1, r + 2, ... modulo n, so the ranks start with
// different peers.
#include <cstring>

#include "parallel/mpi_check.h"
#include "parallel/mpi_exchange.h"

namespace triad::parallel::detail {

namespace {

// Rank r's input to every peer, into chunk r of its output; out of place, this rank's
// own chunk is a copy made when the call starts.
class ExchangeAllGather : public ExchangeWork {
 public:
  ExchangeAllGather(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output, bool in_place)
      : ExchangeWork("all_gather", comm, int(input.numel()), input.dtype(), input, output, 2 * (size - 1)) {
    char* out = static_cast<char*>(output.raw_data());
    for (int i = 1; i < size; ++i) {
      const int peer = (rank + i) % size;
      receive(out + size_t(peer) * bytes_, peer);
    }
    if (!in_place && count_ > 0) std::memcpy(out + size_t(rank) * bytes_, input.raw_data(), bytes_);
    for (int i = 1; i < size; ++i) send(input.raw_data(), (rank + i) % size);
  }
};

// Chunk j of the input to rank j, into chunk r of its output. In place the chunks arrive
// in scratch slots and move into the buffer once every send has completed.
class ExchangeAllToAll : public ExchangeWork {
 public:
  ExchangeAllToAll(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output, bool in_place)
      : ExchangeWork("all_to_all", comm, int(input.numel() / size), input.dtype(), input, output, 2 * (size - 1)),
        rank_(rank),
        size_(size),
        out_(static_cast<char*>(output.raw_data())) {
    if (in_place && size > 1 && count_ > 0) slots_ = scratch(int64_t(size - 1) * count_);
    for (int i = 1; i < size; ++i) {
      const int peer = (rank + i) % size;
      receive(arrival(peer), peer);
    }
    const char* in = static_cast<const char*>(input.raw_data());
    if (!in_place && count_ > 0) std::memcpy(chunk(rank), in + size_t(rank) * bytes_, bytes_);
    for (int i = 1; i < size; ++i) {
      const int peer = (rank + i) % size;
      send(in + size_t(peer) * bytes_, peer);
    }
  }

 private:
  char* chunk(int q) const { return out_ + size_t(q) * bytes_; }
  // Where rank q's chunk arrives: its chunk of the output, or in place a scratch slot.
  char* arrival(int q) const { return slots_ ? slots_ + size_t(q < rank_ ? q : q - 1) * bytes_ : chunk(q); }

  void finished() override {
    if (!slots_) return;
    for (int q = 0; q < size_; ++q)
      if (q != rank_) std::memcpy(chunk(q), arrival(q), bytes_);
  }

  int rank_, size_;
  char* out_;
  char* slots_ = nullptr;
};

// Chunk j of the input, send_counts[j] elements, to rank j, into chunk r of its output;
// this rank's own chunk is a copy made when the call starts.
class ExchangeAllToAllv : public ExchangeWork {
 public:
  ExchangeAllToAllv(MPI_Comm comm, int rank, int size, const Tensor& input, const std::vector<int64_t>& send_counts,
                    const Tensor& output, const std::vector<int64_t>& recv_counts)
      : ExchangeWork("all_to_allv", comm, 0, input.dtype(), input, output, 2 * (size - 1)) {
    const size_t element = element_size(input.dtype());
    std::vector<size_t> send_at(size_t(size) + 1, 0), recv_at(size_t(size) + 1, 0);  // byte offsets of the chunks
    for (size_t q = 0; q < size_t(size); ++q) {
      send_at[q + 1] = send_at[q] + size_t(send_counts[q]) * element;
      recv_at[q + 1] = recv_at[q] + size_t(recv_counts[q]) * element;
    }
    char* out = static_cast<char*>(output.raw_data());
    const char* in = static_cast<const char*>(input.raw_data());
    for (int i = 1; i < size; ++i) {
      const size_t peer = size_t((rank + i) % size);
      receive(out + recv_at[peer], int(peer), int(recv_counts[peer]));
    }
    const size_t own = size_t(rank);
    if (send_counts[own] > 0) std::memcpy(out + recv_at[own], in + send_at[own], send_at[own + 1] - send_at[own]);
    for (int i = 1; i < size; ++i) {
      const size_t peer = size_t((rank + i) % size);
      send(in + send_at[peer], int(peer), int(send_counts[peer]));
    }
  }
};

// root's buffer to every other rank.
class ExchangeBroadcast : public ExchangeWork {
 public:
  ExchangeBroadcast(MPI_Comm comm, int rank, int size, const Tensor& t, int root)
      : ExchangeWork("broadcast", comm, int(t.numel()), t.dtype(), t, Tensor(), rank == root ? size - 1 : 1) {
    if (rank != root)
      receive(t.raw_data(), root);
    else
      for (int i = 1; i < size; ++i) send(t.raw_data(), (root + i) % size);
  }
};

}  // namespace

WorkPtr start_exchange_all_gather(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                  bool in_place) {
  return start<ExchangeAllGather>(comm, rank, size, input, output, in_place);
}

WorkPtr start_exchange_all_to_all(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                  bool in_place) {
  return start<ExchangeAllToAll>(comm, rank, size, input, output, in_place);
}

WorkPtr start_exchange_all_to_allv(MPI_Comm comm, int rank, int size, const Tensor& input,
                                   const std::vector<int64_t>& send_counts, const Tensor& output,
                                   const std::vector<int64_t>& recv_counts) {
  return start<ExchangeAllToAllv>(comm, rank, size, input, send_counts, output, recv_counts);
}

WorkPtr start_exchange_broadcast(MPI_Comm comm, int rank, int size, const Tensor& t, int root) {
  return start<ExchangeBroadcast>(comm, rank, size, t, root);
}

}  // namespace triad::parallel::detail
