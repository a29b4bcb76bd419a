// TRIAD_MPI(call, "MPI_Name"): every MPI return code is checked; a failure throws
// triad::Error with the call, file:line, rank and MPI's message. Included only by the .cpp
// files that talk to MPI (it needs mpi.h).
#pragma once

#include <mpi.h>

#include "parallel/mpi_communicator.h"

#define TRIAD_MPI(call, name)                                                              \
  do {                                                                                     \
    const int triad_mpi_rc_ = (call);                                                      \
    if (triad_mpi_rc_ != MPI_SUCCESS)                                                      \
      ::triad::parallel::detail::throw_mpi_error(triad_mpi_rc_, name, __FILE__, __LINE__); \
  } while (0)
