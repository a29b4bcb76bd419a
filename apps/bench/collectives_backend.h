// What the sweep of `triad-bench collectives` (collectives.cpp) shares with its backends
// (collectives_mpi.cpp; collectives_nccl.cu, or stub/collectives_nccl.cpp in a build without
// NCCL): the collectives, one case of the sweep and its buffers, and the Backend interface,
// which is the communicator under test plus the raw library calls it wraps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "tensor/tensor.h"

namespace triad::bench::collectives {

enum class Op { all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, sendrecv };

// One entry of the sweep's table of collectives (kOps in collectives.cpp).
struct OpInfo {
  Op op;
  const char* name;
  bool out_of_place;  // the placements the Communicator interface has
  bool in_place;
  bool chunked;  // S is n chunks of the call's count (reduce_scatter, all_gather, all_to_all)
  bool reduces;  // a sum: inputs follow the reduction pattern
};

// One case: the op, its placement and its size.
struct Case {
  const OpInfo* info;
  bool in_place;
  int64_t count;  // the call's element count: per-rank chunk for chunked ops, as nccl-tests
  int64_t bytes;  // S (REFERENCE.md): count * n elements for chunked ops, count otherwise
};

// What the op reads (send) and writes (recv), on the backend's device. In place, one is a
// view into the other: reduce_scatter's recv is chunk rank() of send, all_gather's send is
// chunk rank() of recv (the layouts NCCL's in-place forms take), all_to_all's are the same
// tensor. all_reduce and broadcast work on recv (= send).
struct Buffers {
  Tensor send, recv;
};

// The ring neighbours of sendrecv: send to rank + 1, receive from rank - 1.
inline int next_rank(int rank, int n) { return (rank + 1) % n; }
inline int prev_rank(int rank, int n) { return (rank + n - 1) % n; }

class Backend {
 public:
  virtual ~Backend() = default;
  virtual parallel::Communicator& comm() = 0;
  // Where the buffers live. The sweep fills and checks them in host memory, through host
  // copies when this is a device.
  virtual Device device() const = 0;
  virtual const char* library() const = 0;   // "MPI", "NCCL"
  virtual const char* raw_name() const = 0;  // what the raw calls are, for the report's header
  // The same in a word, for the JSON line's "raw": "nonblocking" (MPI_I<coll> + MPI_Wait),
  // "blocking" (MPI_<coll>) or "nccl" (the bare NCCL calls on a communicator and stream of
  // their own).
  virtual const char* raw_kind() const = 0;
  // How the raw call is made in place, for the section's note: "" for the ops whose raw
  // in-place form is triad's (all_reduce, broadcast).
  virtual std::string raw_in_place(Op op) const = 0;
  // The raw library call equivalent to triad's for this case, on the same buffers. Its
  // arguments are prepared here, outside the timed loop, as a program calling the library
  // directly would have them ready.
  virtual std::function<void()> raw_call(const Case& c, const Buffers& b, int root) = 0;
  // Where the raw call leaves its result (it may differ from triad's placement).
  virtual Tensor raw_result(const Case& /*c*/, const Buffers& b) { return b.recv; }
  // Returns when the calls and copies made so far have completed (a device backend: when
  // its streams are idle), so the clock can be read and the results copied out.
  virtual void synchronize() {}
};

// The MPI backend (collectives_mpi.cpp): world is parallel::init's MpiCommunicator; raw
// calls are MPI_I<coll> + MPI_Wait, or the blocking MPI_<coll> with `blocking`.
std::unique_ptr<Backend> make_mpi_backend(const parallel::CommunicatorPtr& world, DType dtype, bool blocking);

// The NCCL backend (collectives_nccl.cu), on the rank's GPU of its node. Collective over
// world. Throws Error when this build has no NCCL (every rank) or the rank's node has
// fewer visible GPUs than ranks.
std::unique_ptr<Backend> make_nccl_backend(const parallel::CommunicatorPtr& world, DType dtype);

}  // namespace triad::bench::collectives
