// The thresholds of MpiCommunicator's collectives by exchange (Note [Collectives by
// exchange], mpi_exchange.h): which path a call takes depends on the op, the
// communicator's size and the buffer's bytes only, so every rank of a call takes the same
// one. Apart from mpi_exchange.h, which includes mpi.h, so that tests can ask.
#pragma once

#include <cstddef>

namespace triad::parallel::detail {

// Where MpiCommunicator runs a collective by exchange (else by libnbc's call):
// reduce_scatter always; all_gather and broadcast on up to kExchangeMaxRanks ranks;
// all_reduce and all_to_all on 2 ranks, and on up to kExchangeMaxRanks for buffers of at
// most kExchangeAllReduceMaxBytes (Note [All-reduce by exchange]) and
// kExchangeAllToAllMaxBytes (above it, on 4 ranks, the in-place exchange's move of the
// received chunks into place made it 0.8 to 0.9 times as fast as MPI_Ialltoall's in-place
// form; out of place the two tie).
inline constexpr int kExchangeMaxRanks = 8;
inline constexpr size_t kExchangeAllReduceMaxBytes = 2048;
inline constexpr size_t kExchangeAllToAllMaxBytes = size_t(1) << 20;

inline bool all_reduce_by_exchange(int size, size_t bytes) {
  return size <= 2 || (size <= kExchangeMaxRanks && bytes <= kExchangeAllReduceMaxBytes);
}
inline bool all_to_all_by_exchange(int size, size_t bytes) {
  return size <= 2 || (size <= kExchangeMaxRanks && bytes <= kExchangeAllToAllMaxBytes);
}

}  // namespace triad::parallel::detail
