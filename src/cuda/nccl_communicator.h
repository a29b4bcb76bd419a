// The Communicator over NCCL, for tensors on a CUDA device. Built when CUDA and NCCL are
// (cmake/cuda.cmake); otherwise make_nccl_communicator throws a clear Error
// (stub/nccl_communicator.cpp).
//
// Beyond communicator.h's contract:
// - Bootstrap: an NCCL communicator is made over the ranks of a host communicator (MPI):
//   its rank 0 draws the ncclUniqueId and broadcasts it there. split() splits the host
//   communicator alike and makes a new NCCL communicator over each part, collectively.
// - Every operation runs on the device's communication stream (Note [Streams]), after an
//   event of the calling thread's current stream: inputs written there are ready. The
//   allocator is told the tensors are used on the communication stream (record_stream),
//   so freeing them early never lets other work overwrite them mid-flight.
// - Work::wait() does not block the host: it makes the calling thread's current stream
//   wait for the operation's event, so every later use of the results through that
//   stream (kernels, copies to the host) sees them. Work::test() queries the event.
//   barrier() blocks the host until every rank has reached it.
// - send/recv: NCCL matches point-to-point messages between two ranks in call order and
//   has no tags; `tag` is accepted and ignored. Sends and receives are held back and
//   issued together (one NCCL group) at the next collective, wait(), test() or barrier(),
//   so a rank may post a receive before the matching send of a ring without deadlock.
// - dtypes: all of triad's; bf16/f16 sums are NCCL's (each reduction step in fp32, rounded
//   back), as MpiCommunicator's are.
// - Errors: every NCCL and CUDA return code is checked (rank, file:line, NCCL's last error),
//   and asynchronous NCCL errors are polled by test() and barrier(). A communicator
//   destroyed while an exception unwinds is aborted (ncclCommAbort) rather than destroyed,
//   so that an error on one rank does not leave it waiting for ranks that will not come.
#pragma once

#include "parallel/communicator.h"

namespace triad::cuda {

bool nccl_built();  // whether this build has the NCCL communicator

// An NCCL communicator over host's ranks for tensors on cuda:device; device -1 picks
// rank_on_node() modulo the visible devices. Collective over host. Throws Error when
// NCCL is not built or the device is not visible.
parallel::CommunicatorPtr make_nccl_communicator(const parallel::CommunicatorPtr& host, int device = -1);

}  // namespace triad::cuda
