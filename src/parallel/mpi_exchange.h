// The MpiCommunicator's collectives by exchange: point-to-point messages in place of Open
// MPI's non-blocking collectives, where they are faster on one node.
//
// Note [Collectives by exchange]: Open MPI 4.1 runs MPI's non-blocking collectives in
// coll/libnbc, whose schedules cost about a microsecond more than a few messages do for
// small calls and move data through temporary buffers, with extra rounds, for large ones
// (MPI_Iallreduce is 2 to 3 times slower than MPI_Allreduce on 2 ranks). Here every rank
// instead sends what each peer needs straight to it and combines what it receives:
// - reduce_scatter: chunk j of the input to rank j; the n − 1 chunks received are reduced
//   into chunk rank() (in place) or the output (Note [Reduce-scatter by exchange]).
// - all_reduce: the whole buffer to every peer; the n buffers are reduced in rank order
//   (Note [All-reduce by exchange]).
// - all_gather: the input to every peer, received into chunk r of the output.
// - all_to_all: chunk j of the input to rank j, received into chunk j of the output (in
//   place: into scratch, moved into the buffer once every message has completed, which
//   makes large in-place calls on more than 2 ranks slower than MPI_Ialltoall's).
// - broadcast: root sends its buffer to every other rank.
// - all_to_allv: chunk j of the input, of its own count, to rank j, received into chunk j
//   of the output: MPI_Ialltoallv's messages, at every size and on any number of ranks
//   (messages of 0 elements too, so every rank checks every count it expects).
// Each rank sends (n − 1) messages (root only, for broadcast), so the fan-out and, for
// all_reduce, the data sent grow linearly in n: MpiCommunicator uses an exchange only
// where it measured faster or as fast (the thresholds of exchange_thresholds.h; benchmarks/results/
// cpu-2core-collectives.md, on 2 and 4 ranks, and 8 for small calls).
//
// Invariants:
// - Every message is posted when the call starts (all receives, then all sends), so the
//   exchange completes inside MPI's progress engine like a non-blocking collective: no
//   rank has to reach wait() or test() for another rank's call to complete. Only local
//   work (reductions, in-place all_to_all's moves) runs in wait() or test().
// - The messages travel on a communicator of their own (the user's, duplicated), with tag
//   0: they never match the user's sends and receives, and calls in flight together match
//   in call order (MPI does not let messages between two ranks on one communicator and tag
//   overtake each other). Which algorithm a call takes depends only on the op, the
//   communicator's size and, for all_reduce and all_to_all, the buffer's size, so every rank of a call
//   takes the same one (a rank that passes another size than its peers may take the
//   other, and then the call hangs, as mismatched MPI collectives may).
// - A buffer a send reads is not written before that send has completed.
// - Every message of a call has the same element count (all_to_allv: the count the
//   receiver passed for its sender); one received with another count
//   (a peer called with a different size) throws Error on completion, naming the peer and
//   both counts, and a longer one fails MPI's receive (truncation): a rank never reduces or
//   returns garbage.
// - The Work holds the storages of its tensors and its scratch until every message has
//   completed; an abandoned Work (destroyed while an exception unwinds, or failed) leaks
//   them, since MPI may still write into them.
//
// Note [Reduce-scatter by exchange]: MPI's in-place reduce_scatter (MPI_IN_PLACE) leaves
// the result in chunk 0 of the buffer, while the Communicator interface, like NCCL,
// promises it in chunk rank(); moving it there afterwards costs a copy of S/n bytes.
// Here every rank sends chunk j of its input to rank j and reduces the n − 1 chunks it
// receives into its own chunk (in place) or into the output (out of place, where the
// first chunk received lands in the output directly), so the result is where the
// interface wants it and nothing is copied after. Each rank sends and receives (n − 1)·k
// elements, as in a ring. Both placements send the same messages, so ranks may differ in
// placement (MPI_IN_PLACE must be passed by all ranks or none). The chunks are reduced as
// they arrive, in a fixed order (rank() + 1, rank() + 2, ... modulo n), so a result does
// not depend on which message arrived first; each chunk of the result is computed on one
// rank only. Scratch: (n − 1)·k elements in place, (n − 2)·k out of place, from the CPU
// allocator (whose cache hands the same block back to the next call of the same size).
// On one node, with Open MPI 4.1, it is faster than MPI_Ireduce_scatter_block in both
// placements, from 1 MiB up by a median of about 6 times on 2 ranks and 2 on 4.
//
// Note [All-reduce by exchange]: every rank sends its whole buffer to every other rank,
// receives theirs into n − 1 scratch slots and, once every message has completed (its own
// buffer is being sent until then), reduces the n buffers in rank order on every rank:
// rank 0's, op rank 1's, ..., op rank n−1's, with the same operand order in every
// combination (MPI_Reduce_local(rank q's, result)). So every rank computes the same
// floating-point expression and ends with a bitwise identical result, as a collective must
// (a float sum depends on its order, and max and min of NaN and signed zeros on operand
// order). bf16/f16 sums round once per combination, n − 1 times (mpi_communicator.h). Rank
// 0 reduces into its own buffer; the others into rank 0's slot, then copy the result into
// theirs. Each rank sends and receives (n − 1)·S bytes and reduces (n − 1)·S, against
// 2·(n − 1)/n·S and (n − 1)/n·S in a ring: on 2 ranks the same traffic, and faster than
// MPI_Iallreduce at every size (1.5 to 3 times from 1 MiB up); on 4 ranks it wins up to
// 2 KiB (1.3 to 2.4 times) and loses from 16 KiB (0.4 to 0.8 times), hence
// kExchangeAllReduceMaxBytes above 2 ranks. A reduce_scatter followed by an all_gather,
// both by exchange, would move a ring's traffic, but its second half can only start once
// each rank has reduced its chunk, in its own wait() or test(): a rank busy waiting on
// something else would stall its peers, which MPI's collectives (progressed by any MPI
// call) and the exchanges here (posted whole at the start) never do.
//
// Internal to the MPI communicator (it includes mpi.h); callers check the arguments first
// (collective_checks.h) and hand over contiguous CPU tensors.
#pragma once

#include <mpi.h>

#include <memory>
#include <utility>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/exchange_thresholds.h"

namespace triad::parallel::detail {

// The calls. Each starts the exchange over `comm`, which must carry no other traffic (the
// communicator's private duplicate), and returns its Work.
WorkPtr start_exchange_all_reduce(MPI_Comm comm, int rank, int size, const Tensor& t, ReduceOp op);
// output: k > 0 elements; in place: chunk `rank` of the input.
WorkPtr start_exchange_reduce_scatter(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                      ReduceOp op, bool in_place);
// in place: input is chunk `rank` of the output.
WorkPtr start_exchange_all_gather(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                  bool in_place);
// in place: input and output are the same tensor.
WorkPtr start_exchange_all_to_all(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                  bool in_place);
WorkPtr start_exchange_broadcast(MPI_Comm comm, int rank, int size, const Tensor& t, int root);
// counts as CollectiveChecks::all_to_allv checked them; input and output disjoint.
WorkPtr start_exchange_all_to_allv(MPI_Comm comm, int rank, int size, const Tensor& input,
                                   const std::vector<int64_t>& send_counts, const Tensor& output,
                                   const std::vector<int64_t>& recv_counts);

// One exchange in flight: its messages, each of `count` elements (or of its own), the storages of its
// tensors and its scratch. A call's class derives from it, posts the messages in its
// constructor (all receives, then all sends), says what to do as they complete, and is
// made by start<Call>, whose destructor completes the exchange while the call's class
// still exists.
class ExchangeWork : public Work {
 public:
  // `call` (a literal) names the call in errors; `a` and `b` are the tensors it reads and
  // writes (b may be a, or undefined).
  ExchangeWork(const char* call, MPI_Comm comm, int count, DType dtype, const Tensor& a, const Tensor& b, int messages);
  ~ExchangeWork() override;  // abandons the exchange if it was not completed (a constructor threw)

  void wait() override;
  bool test() override;

 protected:
  // Posts a receive of `count` elements from rank `from` into `buffer`.
  void receive(void* buffer, int from);
  // Posts a send of `count` elements from `buffer` to rank `to` (after every receive).
  void send(const void* buffer, int to);
  // The same with a count of the message's own (all_to_allv).
  void receive(void* buffer, int from, int count);
  void send(const void* buffer, int to, int count);
  // A buffer of `elements` elements of the call's dtype, held by the Work.
  char* scratch(int64_t elements);

  // Receive i (in posting order) has completed with the right count. It may write only
  // buffers no send reads.
  virtual void received(int /*i*/) {}
  // Every receive and send has completed.
  virtual void finished() {}
  // MPI_Reduce_local(in, inout), checked.
  void reduce_local(const void* in, void* inout, MPI_Op op);
  // A Work destroyed before completion: waits for it, except while an exception unwinds
  // the stack (then it is abandoned, so that an error on one rank reaches the top-level
  // handler, which aborts the job, instead of hanging on ranks that will never join).
  void settle();

  const int count_;  // elements per message
  const MPI_Datatype type_;
  const size_t bytes_;  // bytes per message

 private:
  void post_receive(void* buffer, int from, int count);
  void handle(int i, int rc, const MPI_Status& status, const char* how);
  void complete();
  // An MPI failure: the call is over for this Work, but other messages of it may still be
  // in flight, so their buffers stay allocated (the job is about to abort).
  void check(int rc, const char* how);
  void abandon();

  // The storages, not Tensor handles: a handle's storage may be repointed while the
  // messages are in flight, and the bytes MPI reads and writes must stay allocated.
  struct Keep {
    std::shared_ptr<Storage> a, b, scratch;
  };
  const char* call_;
  MPI_Comm comm_;
  DType dtype_;
  Keep keep_;
  // The receives in posting order, then the sends: in the Work itself up to the messages
  // of kExchangeMaxRanks ranks (a small call allocates nothing for them), else spilled.
  MPI_Request inline_[2 * (kExchangeMaxRanks - 1)];
  int sources_[2 * (kExchangeMaxRanks - 1)];  // the rank each receive comes from (for comm_timeout's report)
  std::vector<int> counts_;                   // each receive's count, where they differ (all_to_allv)
  std::vector<MPI_Request> spilled_;
  MPI_Request* requests_;
  int posted_ = 0;    // messages posted
  int receives_ = 0;  // receives posted (the first requests)
  int handled_ = 0;   // receives completed and handed to received()
  bool done_ = false;
};

// A call's Work: settles the exchange in its destructor, before the call's class is gone.
template <class Call>
class Exchange final : public Call {
 public:
  using Call::Call;
  ~Exchange() override { this->settle(); }
};

template <class Call, class... Args>
WorkPtr start(Args&&... args) {
  return std::make_unique<Exchange<Call>>(std::forward<Args>(args)...);
}

}  // namespace triad::parallel::detail
