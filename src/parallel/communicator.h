// Communicator: the one interface every collective in triad goes through. The MPI
// implementation (mpi_communicator.h) runs on the host and stages device tensors through
// it; the NCCL one (cuda/nccl_communicator.h) runs on a GPU. A counting wrapper
// (counting_communicator.h) measures what a step sends.
//
// Contracts, for every implementation:
// - Tensors are contiguous, on a device the communicator takes, of the same dtype and of
//   the sizes each collective states below on every rank; sums of bf16/f16 accumulate in
//   fp32. collective_checks.h holds these rules, shared by every implementation.
// - Every rank of the communicator calls the same collectives in the same order.
// - Each call starts the operation and returns a Work; the buffers must stay alive and
//   untouched until wait() returns. Calls on one communicator complete in order.
// - Errors (from the transport, or bad arguments) throw triad::Error naming the call.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace triad::parallel {

enum class ReduceOp { sum, max, min };

// An operation in flight.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // blocks until the operation has completed
  virtual bool test() = 0;  // true once complete; drives progress without blocking
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "mpi", "counting(mpi)", ...
  // The MPI_Comm this communicator's collectives run over, as an opaque pointer to it, for
  // code behind .cpp walls that needs MPI itself (parallel HDF5:
  // `*static_cast<const MPI_Comm*>(comm.mpi_handle())`); null when it runs over none (one
  // process, NCCL). A wrapper answers for what it wraps.
  virtual const void* mpi_handle() const { return nullptr; }

  // The axis of the process grid this group spans ("tp", "dp", "pp", "ep", ...; "world"
  // for the job), which messages name (Note [Collective deadline], watchdog.h). The grid
  // sets it on the groups it makes; a wrapper passes it to what it wraps.
  virtual void set_axis(const std::string& axis) { axis_ = axis; }
  const std::string& axis() const { return axis_; }

  // Ranks with the same color form a new communicator, ordered by key (then by rank).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

  // In place: every rank ends with the reduction of all ranks' tensors, the same bits on
  // every rank (replicated parameters and loss-scale verdicts rely on it: MPI's exchange
  // reduces in rank order everywhere; libnbc's and NCCL's algorithms reduce each element
  // once and copy it, or in a commutative pairing that gives every rank the same sums).
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // input: size() * k elements on every rank; output: k elements, the reduction of chunk
  // rank() of every rank's input.
  virtual WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum) = 0;
  // input: k elements; output: size() * k elements, chunk r holding rank r's input.
  virtual WorkPtr all_gather(const Tensor& input, const Tensor& output) = 0;
  // input and output: size() * k elements; chunk r of the input goes to rank r, and
  // chunk r of the output comes from rank r.
  virtual WorkPtr all_to_all(const Tensor& input, const Tensor& output) = 0;
  // The variable-size all-to-all (MPI_Alltoallv's layout, each chunk right after the one
  // before): chunk r of the input, send_counts[r] elements, goes to rank r, and chunk r of
  // the output, recv_counts[r] elements, comes from rank r. Every rank passes size()
  // counts each way, any of them 0; send_counts[r] here must equal recv_counts[rank()] on
  // rank r. input and output hold the sums of their counts and do not overlap.
  virtual WorkPtr all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                              const std::vector<int64_t>& recv_counts) = 0;
  // In place: every rank ends with root's tensor.
  virtual WorkPtr broadcast(const Tensor& t, int root) = 0;
  virtual WorkPtr send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(const Tensor& t, int src, int tag = 0) = 0;
  // recv(recv, src, recv_tag) and send(send, dst, send_tag) as one operation with one Work:
  // the exchange of a ring step or of a pipeline stage with its neighbour (nccl-tests'
  // grouped sendrecv, Megatron's batch_isend_irecv). The two tensors must not overlap.
  // This default posts the two calls; transports override it to post both at once.
  virtual WorkPtr send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src, int recv_tag);
  // The same with one tag both ways (a ring step).
  WorkPtr send_recv(const Tensor& send, int dst, const Tensor& recv, int src, int tag = 0) {
    return send_recv(send, dst, tag, recv, src, tag);
  }
  virtual void barrier() = 0;

 private:
  std::string axis_ = "world";
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

}  // namespace triad::parallel
