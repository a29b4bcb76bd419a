// The MPI backend of `triad-bench collectives` (collectives_backend.h): the MpiCommunicator
// beside MPI's own non-blocking collectives. Each raw call is started and then waited for
// (MPI_I<coll> + MPI_Wait). Where the communicator calls the same (on 3 to 8 ranks
// all_reduce above 2 KiB and all_to_all above 1 MiB; on more than 8, every collective but
// reduce_scatter) it is the same work minus the wrapper; elsewhere the communicator
// replaces it by an exchange of point-to-point messages (Note [Collectives by exchange]),
// and the raw call is what that exchange is measured against. With `blocking` (--raw
// blocking) the blocking calls stand in, which Open MPI runs with other algorithms, to
// show what the choice of non-blocking calls costs.
#include <mpi.h>

#include "bench/collectives_backend.h"
#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"
#include "tensor/ops.h"

namespace triad::bench::collectives {

namespace {

void wait(MPI_Request& request) { TRIAD_MPI(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait"); }

class MpiBackend final : public Backend {
 public:
  MpiBackend(std::shared_ptr<parallel::MpiCommunicator> comm, DType dtype, bool blocking)
      : comm_(std::move(comm)),
        mpi_comm_(*static_cast<const MPI_Comm*>(comm_->mpi_handle())),
        type_(parallel::detail::mpi_type(dtype)),
        sum_(parallel::detail::mpi_op(parallel::ReduceOp::sum, dtype)),  // the communicator's own
        blocking_(blocking) {}

  parallel::Communicator& comm() override { return *comm_; }
  Device device() const override { return Device::cpu(); }
  const char* library() const override { return "MPI"; }
  const char* raw_name() const override {
    return blocking_ ? "blocking MPI call (MPI_Allreduce, ...; not what the communicator makes)"
                     : "non-blocking MPI collective (MPI_Iallreduce, MPI_Ireduce_scatter_block, ... + MPI_Wait), where "
                       "the communicator makes exchanges of MPI_Isend/Irecv: reduce_scatter always, the others on up "
                       "to 8 ranks (all_reduce above 2 KiB and all_to_all above 1 MiB: on 2 ranks only)";
  }
  const char* raw_kind() const override { return blocking_ ? "blocking" : "nonblocking"; }
  std::string raw_in_place(Op op) const override {
    switch (op) {
      case Op::reduce_scatter:
        return "MPI_IN_PLACE, result in chunk 0";
      case Op::all_gather:
      case Op::all_to_all:
        return "MPI_IN_PLACE";
      case Op::all_reduce:
      case Op::broadcast:
      case Op::sendrecv:
        break;
    }
    return "";
  }

  std::function<void()> raw_call(const Case& c, const Buffers& b, int root) override {
    Args a{mpi_comm_,
           type_,
           sum_,
           b.send.raw_data(),
           b.recv.raw_data(),
           int(c.count),
           root,
           next_rank(comm_->rank(), comm_->size()),
           prev_rank(comm_->rank(), comm_->size())};
    // In place, MPI_IN_PLACE stands for the input; reduce_scatter's result then lands in
    // chunk 0 of the input (raw_result), all_gather's input is chunk rank() of the output.
    if (c.in_place && c.info->op != Op::all_reduce && c.info->op != Op::broadcast) a.send = MPI_IN_PLACE;
    if (c.in_place && c.info->op == Op::reduce_scatter) a.recv = b.send.raw_data();
    return blocking_ ? blocking_call(c.info->op, a) : nonblocking_call(c.info->op, a);
  }

  Tensor raw_result(const Case& c, const Buffers& b) override {
    if (c.info->op == Op::reduce_scatter && c.in_place) return ops::narrow(b.send, 0, 0, c.count);
    return b.recv;
  }

 private:
  // A raw call's arguments, ready before the timed loop. all_reduce and broadcast work on
  // `recv` in place.
  struct Args {
    MPI_Comm comm;
    MPI_Datatype type;
    MPI_Op sum;
    void* send;
    void* recv;
    int count, root, next, prev;
  };

  // MPI's non-blocking call, then MPI_Wait (sendrecv: receive posted first).
  static std::function<void()> nonblocking_call(Op op, const Args& a) {
    switch (op) {
      case Op::all_reduce:
        return [a] {
          MPI_Request r;
          TRIAD_MPI(MPI_Iallreduce(MPI_IN_PLACE, a.recv, a.count, a.type, a.sum, a.comm, &r), "MPI_Iallreduce");
          wait(r);
        };
      case Op::reduce_scatter:
        return [a] {
          MPI_Request r;
          TRIAD_MPI(MPI_Ireduce_scatter_block(a.send, a.recv, a.count, a.type, a.sum, a.comm, &r),
                    "MPI_Ireduce_scatter_block");
          wait(r);
        };
      case Op::all_gather:
        return [a] {
          MPI_Request r;
          TRIAD_MPI(MPI_Iallgather(a.send, a.count, a.type, a.recv, a.count, a.type, a.comm, &r), "MPI_Iallgather");
          wait(r);
        };
      case Op::all_to_all:
        return [a] {
          MPI_Request r;
          TRIAD_MPI(MPI_Ialltoall(a.send, a.count, a.type, a.recv, a.count, a.type, a.comm, &r), "MPI_Ialltoall");
          wait(r);
        };
      case Op::broadcast:
        return [a] {
          MPI_Request r;
          TRIAD_MPI(MPI_Ibcast(a.recv, a.count, a.type, a.root, a.comm, &r), "MPI_Ibcast");
          wait(r);
        };
      case Op::sendrecv:
        return [a] {
          MPI_Request r[2];
          TRIAD_MPI(MPI_Irecv(a.recv, a.count, a.type, a.prev, 0, a.comm, &r[0]), "MPI_Irecv");
          TRIAD_MPI(MPI_Isend(a.send, a.count, a.type, a.next, 0, a.comm, &r[1]), "MPI_Isend");
          wait(r[0]);
          wait(r[1]);
        };
    }
    return {};
  }

  // The blocking collectives (--raw blocking): Open MPI runs them with other algorithms
  // (coll/tuned) than the non-blocking ones (coll/libnbc), so this shows what the choice of
  // non-blocking calls costs, which the wrapper itself does not.
  static std::function<void()> blocking_call(Op op, const Args& a) {
    switch (op) {
      case Op::all_reduce:
        return [a] { TRIAD_MPI(MPI_Allreduce(MPI_IN_PLACE, a.recv, a.count, a.type, a.sum, a.comm), "MPI_Allreduce"); };
      case Op::reduce_scatter:
        return [a] {
          TRIAD_MPI(MPI_Reduce_scatter_block(a.send, a.recv, a.count, a.type, a.sum, a.comm),
                    "MPI_Reduce_scatter_block");
        };
      case Op::all_gather:
        return [a] {
          TRIAD_MPI(MPI_Allgather(a.send, a.count, a.type, a.recv, a.count, a.type, a.comm), "MPI_Allgather");
        };
      case Op::all_to_all:
        return
            [a] { TRIAD_MPI(MPI_Alltoall(a.send, a.count, a.type, a.recv, a.count, a.type, a.comm), "MPI_Alltoall"); };
      case Op::broadcast:
        return [a] { TRIAD_MPI(MPI_Bcast(a.recv, a.count, a.type, a.root, a.comm), "MPI_Bcast"); };
      case Op::sendrecv:
        return [a] {
          TRIAD_MPI(MPI_Sendrecv(a.send, a.count, a.type, a.next, 0, a.recv, a.count, a.type, a.prev, 0, a.comm,
                                 MPI_STATUS_IGNORE),
                    "MPI_Sendrecv");
        };
    }
    return {};
  }

  std::shared_ptr<parallel::MpiCommunicator> comm_;
  MPI_Comm mpi_comm_;
  MPI_Datatype type_;
  MPI_Op sum_;
  bool blocking_;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const parallel::CommunicatorPtr& world, DType dtype, bool blocking) {
  auto mpi = std::dynamic_pointer_cast<parallel::MpiCommunicator>(world);
  TRIAD_ASSERT_MSG(mpi != nullptr, "parallel::init returned a " << world->name() << " communicator");
  return std::make_unique<MpiBackend>(std::move(mpi), dtype, blocking);
}

}  // namespace triad::bench::collectives
