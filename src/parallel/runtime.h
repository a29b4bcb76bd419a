// The MPI runtime of a triad process: start-up, shut-down and whole-job abort, behind
// functions that never expose mpi.h. A program calls init() once at the top (directly or
// through apps/common/main_guard), builds its ProcessGrid from the communicator it
// returns, and calls finalize() before exiting. A process that never calls init() is a
// single-process program: initialized() is false and world_rank() is 0.
//
// Threading: MPI is initialized with MPI_THREAD_FUNNELED, so every MPI call (every
// Communicator method and every Work::wait/test) must come from the thread that called
// init(). OpenMP regions inside compute kernels are fine; they make no MPI calls.
#pragma once

#include "parallel/communicator.h"

namespace triad::parallel {

// Initializes MPI (MPI_Init_thread, FUNNELED) unless it already is, sets MPI_ERRORS_RETURN
// on MPI_COMM_WORLD, and returns the world communicator (an MpiCommunicator over
// MPI_COMM_WORLD). Idempotent: later calls return the same communicator. Throws Error
// when MPI cannot be started or was already finalized.
CommunicatorPtr init(int& argc, char**& argv);

// The communicator init() returned; throws Error when MPI is not initialized.
CommunicatorPtr world();

// Frees triad's MPI objects (reduction ops, the node communicator) and calls
// MPI_Finalize. Safe to call twice and when init() was never called. Communicators still
// alive afterwards skip MPI_Comm_free in their destructors.
void finalize();

// Ends the whole job with exit status `code`: MPI_Abort on MPI_COMM_WORLD when MPI is
// running, std::exit(code) otherwise. Flushes stdout and stderr first.
[[noreturn]] void abort_job(int code);

// Note [A failing rank's end]: a rank that has printed its error ends the job, but an error
// is often one every rank meets (a bad config key, a damaged file agreed on, a checkpoint
// of another shape), and aborting at once from the first rank would kill the others before
// they print theirs. So a failing rank first waits, up to kFailureGraceSeconds, in a
// barrier that only failing ranks enter (over a duplicate of the world made at init, so no
// other traffic can match it): when every rank arrives, every rank has printed, and the job
// is aborted from all of them; when some rank does not (it may be blocked in a collective,
// waiting for this one), the job is aborted when the time is up. Never hangs.
constexpr double kFailureGraceSeconds = 3.0;
// Flushes stdout and stderr and ends the job with exit status `code` as the note says
// (std::exit(code) when MPI is not running).
[[noreturn]] void end_failing_rank(int code);

// Whether this process was started by mpirun/mpiexec (Open MPI's or PMI's environment is
// set): such a process should call init(); a plain one runs as a single process.
bool launched_by_mpirun();

bool initialized();  // true between init() and finalize()
int world_rank();    // rank in MPI_COMM_WORLD; 0 when not initialized
int world_size();    // size of MPI_COMM_WORLD; 1 when not initialized

// Ranks of MPI_COMM_WORLD that share this rank's node (MPI_COMM_TYPE_SHARED), and this
// rank's position among them; 1 and 0 when not initialized.
int ranks_on_node();
int rank_on_node();
// An id shared by exactly the ranks on this node: the lowest world rank among them
// (0 when not initialized).
int node_id();

// Launch rule "threads per rank default to cores / ranks on the node": `requested` when
// > 0, else max(1, std::thread::hardware_concurrency() / ranks_on_node()).
int threads_per_rank(int requested);

}  // namespace triad::parallel
