// MpiCommunicator: the Communicator over an MPI communicator (Open MPI's C API, host
// memory). Every call is non-blocking and returns a Work; what it starts:
// - reduce_scatter: an exchange of MPI_Isend/Irecv on a private duplicate of the
//   communicator, the chunks reduced by MPI_Reduce_local in wait() or test() (Note
//   [Reduce-scatter by exchange]).
// - all_reduce: on up to 8 ranks, the same kind of exchange, the buffers reduced in rank
//   order in wait() or test() (Note [All-reduce by exchange]): on 2 ranks at every size,
//   above 2 ranks up to 2 KiB; otherwise MPI_Iallreduce.
// - all_gather, broadcast: on up to 8 ranks an exchange of messages; on more,
//   MPI_Iallgather (always in place: an input elsewhere is first copied into its chunk of
//   the output) and MPI_Ibcast.
// - all_to_all: an exchange of messages on 2 ranks, and on up to 8 for buffers of up to
//   1 MiB (in place, the chunks received move into place in wait() or test()); otherwise
//   MPI_Ialltoall.
// - all_to_allv: an exchange of messages, one to every peer (empty ones too), at every
//   size.
// - send, recv: MPI_Isend, MPI_Irecv on the communicator itself; send_recv posts both,
//   and its one Work completes both.
// wait() and test() are MPI_Wait and MPI_Test on the request(s). On one node the
// exchanges are faster than Open MPI's non-blocking collectives (coll/libnbc), by a
// microsecond or so for small calls and by several times for some large ones (Note
// [Collectives by exchange], mpi_exchange.h, gives the thresholds and their reasons).
//
// Beyond communicator.h's contract:
// - Devices: cpu tensors go to MPI as they are. Tensors on a device whose backend stages
//   transfers (CUDA) are copied to host buffers and back around the MPI call, so ranks
//   that share a GPU can run device code over MPI (Note [Staged collectives],
//   staged_collectives.h). For them the call blocks the host until the inputs are on the
//   host, and wait() blocks the host for MPI but not for the copy back: it makes the
//   calling thread's current stream wait for that copy, as NCCL's Work does, so later
//   work on that stream sees the result. The input and output of a call share a device.
// - dtypes: f32, f64, i64, i32, i8 map to MPI's types. bf16 and f16 travel as raw 2-byte
//   elements; their reductions use user MPI_Ops that convert both operands to float,
//   combine them and round the result back to nearest even. So every pairwise
//   combination is exact-in-fp32-then-rounded: a sum over n ranks is rounded up to n−1
//   times (once per combination step of the algorithm: by exchange, rank 0's + rank 1's,
//   then + rank 2's, ...), not once at the end. Sums of values whose partial sums are
//   representable (small integers: bf16 up to 256, f16 up to 2048) are exact; in general
//   expect a relative error up to about (n−1)·2^-8 for bf16 and (n−1)·2^-11 for f16. max
//   and min are exact.
// - In place, as NCCL allows: reduce_scatter's output may be chunk rank() of its input,
//   and all_gather's input may be chunk rank() of its output. all_to_all's input may be
//   its output. Any other overlap of input and output throws.
//   After an in-place reduce_scatter the input's other chunks are unspecified; out of
//   place, the input is left unchanged. Ranks may differ in placement (all_to_all only
//   where it runs by exchange: MPI_Ialltoall needs MPI_IN_PLACE on all ranks or none).
// - Element counts are MPI ints: a tensor of more than 2^31 − 1 elements throws Error.
// - Arguments are checked by collective_checks.h's rules before anything is sent.
// - A Work holds its tensors' storages, so they live until the operation completes. A
//   Work destroyed before completion waits for it, except while an exception unwinds
//   the stack: then it is abandoned (its request and buffers leaked) so that an error on
//   one rank reaches the top-level handler, which aborts the job, instead of hanging in
//   MPI_Wait for ranks that will never join.
// - recv checks on completion that the message had exactly t.numel() elements, and every
//   exchange that each message it received had the size this rank passed: mismatched
//   sizes throw on wait() (naming the peer and both counts, recv also the tag and the
//   tensor's dtype and shape; or MPI's truncation error) instead of reducing or returning
//   garbage. (A mismatched all_reduce or all_to_all on 3 to 8 ranks whose sizes fall on
//   both sides of 2 KiB or 1 MiB runs two algorithms and may hang, as mismatched MPI
//   collectives may; so may a mismatched call that MPI's own collective runs, on more
//   than 8 ranks.)
// - all_reduce by exchange leaves bitwise identical results on every rank, whatever the
//   order in which messages arrive.
// - Progress: Open MPI advances non-blocking collectives only inside MPI calls of this
//   process (wait, test, any other call). To overlap communication with computation,
//   call Work::test() now and then during the computation (e.g. between layers).
// - Waits have a deadline when comm_timeout is set (Note [Collective deadline],
//   watchdog.h): a wait past it names the call, its number and group, and aborts the job.
//   Calls on device tensors are watched in the host calls they stage.
// - Every MPI return code is checked (communicators use MPI_ERRORS_RETURN); failures
//   throw triad::Error naming the MPI call, file:line, the world rank and MPI's message.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace triad::parallel {

class MpiCommunicator : public Communicator {
 public:
  struct Impl;  // holds the MPI_Comm (defined in the .cpp: this header never sees mpi.h)

  explicit MpiCommunicator(std::unique_ptr<Impl> impl);
  // MPI_Comm_free of the duplicate, and of the comm unless it is the world (not once MPI
  // is finalized).
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // The communicator over MPI_COMM_WORLD (not owned: never freed). MPI must be initialized;
  // runtime's init() calls this once and hands out the result.
  static std::shared_ptr<MpiCommunicator> wrap_world();

  int rank() const override;
  int size() const override;
  std::string name() const override { return "mpi"; }

  // MPI_Comm_split. color must be >= 0 (Error otherwise). Collective over this communicator.
  std::shared_ptr<Communicator> split(int color, int key) override;
  // The ranks of this communicator on the same node (MPI_Comm_split_type with
  // MPI_COMM_TYPE_SHARED), ordered by rank. Collective.
  std::shared_ptr<MpiCommunicator> split_by_node();

  WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum) override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output) override;
  WorkPtr all_to_all(const Tensor& input, const Tensor& output) override;
  WorkPtr all_to_allv(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& output,
                      const std::vector<int64_t>& recv_counts) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr send(const Tensor& t, int dst, int tag = 0) override;
  WorkPtr recv(const Tensor& t, int src, int tag = 0) override;
  using Communicator::send_recv;
  WorkPtr send_recv(const Tensor& send, int dst, int send_tag, const Tensor& recv, int src, int recv_tag) override;
  void barrier() override;

  const void* mpi_handle() const override;
  void set_axis(const std::string& axis) override;

 private:
  // work, watched while it blocks (Note [Collective deadline], watchdog.h), numbered.
  WorkPtr watch(const char* call, WorkPtr work);

  std::unique_ptr<Impl> impl_;
};

namespace detail {
// Throws triad::Error "<call> failed at <file>:<line> (rank R): <MPI's message>".
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);
// Frees the bf16/f16 reduction MPI_Ops (runtime's finalize() calls it before MPI_Finalize).
void free_mpi_reduction_ops();
}  // namespace detail

}  // namespace triad::parallel
