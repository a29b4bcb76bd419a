// `triad-bench collectives`: an nccl-tests-style benchmark of the Communicator's collectives
// (all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, and a send/recv ring),
// each timed beside the raw library call it wraps, on the same buffers, in the same run.
//
// Run under mpirun, every rank alike:
//   mpirun -np N triad-bench collectives [--ops all_reduce,...] [--min-bytes 8]
//       [--max-bytes 256M] [--factor 2] [--warmup 5] [--iters 20] [--rounds 1] [--dtype f32]
//       [--check 1] [--root 0] [--comm mpi|nccl] [--raw nonblocking|blocking]
//
// --comm mpi times the MpiCommunicator on host buffers beside MPI's own non-blocking calls;
// --comm nccl times the NCCL communicator on the rank's GPU of its node (one rank per GPU)
// beside the bare NCCL calls on an NCCL communicator and stream of their own. --comm nccl
// needs a build with CUDA and NCCL and a GPU on every rank; without them every rank fails
// with an error saying which is missing.
//
// For each op, each placement the Communicator interface has (out of place, in place) and
// each size from --min-bytes to --max-bytes (times --factor), it prints one table row: the
// size, the call's element count, time per call, algbw and busbw (nccl-tests' definitions,
// REFERENCE.md "Collective benchmarks"), the raw call's time and busbw, triad/raw, and
// #wrong: result elements that differ from the closed-form expectation after one more call
// on freshly filled buffers. Then an "Avg bus bandwidth" line, the total #wrong and, as the
// last line, one JSON object with every row and a summary ("raw" names the raw side:
// nonblocking or blocking MPI calls, or nccl). The exit status is 1 when any
// element was wrong. Bad options throw triad::Error on every rank before any collective.
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct CollectivesOptions {
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "sendrecv"};
  std::string min_bytes = "8";     // a byte count, optionally with K, M or G (powers of 1024)
  std::string max_bytes = "256M";  // the sweep stops at the last size <= this
  int64_t factor = 2;              // each size is the previous one times this
  int warmup = 5;                  // untimed calls before each timed block
  int iters = 20;                  // timed calls per block
  int rounds = 1;                  // timed blocks per case and call (median); 1 is nccl-tests' way
  std::string dtype = "f32";
  int check = 1;                    // 1: check the results (the #wrong column); 0: skip the check
  int root = 0;                     // broadcast's root
  std::string comm = "mpi";         // the communicator under test: mpi or nccl
  std::string raw = "nonblocking";  // --comm mpi's raw calls: nonblocking (MPI_I<coll> + MPI_Wait) or blocking
};

// Adds the subcommand; when it runs, `status` receives run_collectives_bench's result.
void add_collectives_command(CLI::App& app, CollectivesOptions& options, int& status);
// Returns the process exit status: 0, or 1 when any result element was wrong.
int run_collectives_bench(const CollectivesOptions& options);

}  // namespace triad::bench
