// reduce_scatter over MPI point-to-point messages, for the MpiCommunicator.
//
// Note [Reduce-scatter by exchange]: MPI's in-place reduce_scatter (MPI_IN_PLACE) leaves
// the result in chunk 0 of the buffer, while the Communicator interface, like NCCL,
// promises it in chunk rank(); moving it there afterwards costs a copy of S/n bytes.
// Here every rank instead sends chunk j of its input to rank j and reduces the n − 1
// chunks it receives into its own chunk (in place) or into the output (out of place,
// where the first chunk received lands in the output directly), so the result is where
// the interface wants it and nothing is copied after. Each rank sends and receives
// (n − 1)·k elements, as in a ring. Both placements send the same messages, so ranks may
// differ in placement (MPI_IN_PLACE must be passed by all ranks or none). On one node,
// with Open MPI 4.1, it is faster than MPI_Ireduce_scatter_block in both placements, from
// 1 MiB up by a median of about 6 times on 2 ranks and 2 on 4
// (benchmarks/results/cpu-2core-collectives.md).
//
// Invariants:
// - Every message is posted when the call starts (all receives, then all sends), so the
//   exchange completes inside MPI's progress engine like a non-blocking collective: no
//   rank has to reach wait() or test() for another rank's call to complete. Only the local
//   reductions run in wait() or test().
// - The messages travel on a communicator of their own (a duplicate of the user's), with
//   tag 0: they never match the user's sends and receives, and calls in flight together
//   match in call order (MPI does not let messages between two ranks on one communicator
//   and tag overtake each other).
// - The chunks are reduced in a fixed order (rank() + 1, rank() + 2, ... modulo n), so a
//   result does not depend on which message arrived first. bf16/f16 sums round once per
//   combination, n − 1 times, as with MPI's collectives (mpi_communicator.h).
// - A chunk received with another element count than this rank's (a peer called with a
//   different size) throws Error on completion, naming the peer and both counts.
// - Scratch: (n − 1)·k elements in place, (n − 2)·k out of place, from the CPU allocator
//   (whose cache hands the same block back to the next call of the same size).
//
// Internal to the MPI communicator (it includes mpi.h); callers check the arguments first.
#pragma once

#include <mpi.h>

#include "parallel/communicator.h"

namespace triad::parallel::detail {

// Starts reduce_scatter of `input` (size · k elements, contiguous, on the CPU) into
// `output` (k > 0 elements; in place: chunk `rank` of the input) over `comm`, which must
// carry no other traffic (the communicator's private duplicate). The returned Work holds
// the tensors and the scratch until it completes.
WorkPtr start_exchange_reduce_scatter(MPI_Comm comm, int rank, int size, const Tensor& input, const Tensor& output,
                                      ReduceOp op, bool in_place);

}  // namespace triad::parallel::detail
