// TRIAD_MPI(call, "MPI_Name"): every MPI return code is checked; a failure throws
// triad::Error with the call, file:line, rank and MPI's message. With it, the MPI types
// and reduction ops of triad's dtypes, as the MpiCommunicator uses them. Included only by
// the .cpp files that talk to MPI (it needs mpi.h).
#pragma once

#include <mpi.h>

#include "parallel/mpi_communicator.h"

#define TRIAD_MPI(call, name)                                                              \
  do {                                                                                     \
    const int triad_mpi_rc_ = (call);                                                      \
    if (triad_mpi_rc_ != MPI_SUCCESS)                                                      \
      ::triad::parallel::detail::throw_mpi_error(triad_mpi_rc_, name, __FILE__, __LINE__); \
  } while (0)

namespace triad::parallel::detail {

// The MPI datatype of a dtype's elements (bf16 and f16: raw 2-byte elements).
MPI_Datatype mpi_type(DType t);
// The MPI_Op of `op` on dtype t: MPI's own, or for bf16/f16 a user op that converts both
// operands to float, combines them and rounds back to nearest even (mpi_communicator.h).
MPI_Op mpi_op(ReduceOp op, DType t);
// Whether MPI_Finalize has run (a Work destroyed after it must not touch its requests).
bool mpi_finalized();

}  // namespace triad::parallel::detail
