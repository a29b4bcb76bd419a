// MPI start-up and shut-down. The node facts (ranks on this node, position, node id) are
// computed once in init(), collectively, so later queries never communicate.
#include "parallel/runtime.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"

namespace triad::parallel {

namespace {

struct State {
  std::shared_ptr<MpiCommunicator> world;
  MPI_Comm failures = MPI_COMM_NULL;  // Note [A failing rank's end]: failing ranks' barrier
  int ranks_on_node = 1, rank_on_node = 0, node_id = 0;
};
State g_state;

bool mpi_running() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

}  // namespace

CommunicatorPtr init(int& argc, char**& argv) {
  if (g_state.world && mpi_running()) return g_state.world;
  int fin = 0;
  MPI_Finalized(&fin);
  TRIAD_CHECK(!fin, "parallel::init: MPI was already finalized in this process");
  int started = 0;
  MPI_Initialized(&started);
  if (!started) {
    int provided = 0;
    const int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    TRIAD_CHECK(rc == MPI_SUCCESS, "parallel::init: MPI_Init_thread failed with code " << rc);
    TRIAD_CHECK(provided >= MPI_THREAD_FUNNELED,
                "parallel::init: MPI provides thread level " << provided << ", triad needs MPI_THREAD_FUNNELED");
  }
  TRIAD_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");

  int world_rank = 0;
  TRIAD_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  MPI_Comm node = MPI_COMM_NULL;
  TRIAD_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  State s;
  TRIAD_MPI(MPI_Comm_size(node, &s.ranks_on_node), "MPI_Comm_size");
  TRIAD_MPI(MPI_Comm_rank(node, &s.rank_on_node), "MPI_Comm_rank");
  TRIAD_MPI(MPI_Allreduce(&world_rank, &s.node_id, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce(node id)");
  TRIAD_MPI(MPI_Comm_free(&node), "MPI_Comm_free");
  TRIAD_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &s.failures), "MPI_Comm_dup(failures)");
  s.world = MpiCommunicator::wrap_world();
  g_state = std::move(s);
  return g_state.world;
}

CommunicatorPtr world() {
  TRIAD_CHECK(g_state.world && mpi_running(), "parallel::world: MPI is not initialized (call parallel::init first)");
  return g_state.world;
}

void finalize() {
  if (!mpi_running()) return;
  detail::free_mpi_reduction_ops();
  const int rank = world_rank();
  if (g_state.failures != MPI_COMM_NULL) MPI_Comm_free(&g_state.failures);
  g_state = State{};
  const int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) std::fprintf(stderr, "rank %d: warning: MPI_Finalize failed (code %d)\n", rank, rc);
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void end_failing_rank(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (!mpi_running()) std::exit(code);
  MPI_Request arrived = MPI_REQUEST_NULL;
  if (g_state.failures != MPI_COMM_NULL && MPI_Ibarrier(g_state.failures, &arrived) == MPI_SUCCESS) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(kFailureGraceSeconds);
    int all = 0;
    while (MPI_Test(&arrived, &all, MPI_STATUS_IGNORE) == MPI_SUCCESS && !all &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

bool initialized() { return mpi_running(); }

int world_rank() {
  if (!mpi_running()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  if (!mpi_running()) return 1;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int ranks_on_node() { return mpi_running() ? g_state.ranks_on_node : 1; }
int rank_on_node() { return mpi_running() ? g_state.rank_on_node : 0; }
int node_id() { return mpi_running() ? g_state.node_id : 0; }

int threads_per_rank(int requested) {
  if (requested > 0) return requested;
  const int cores = int(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, ranks_on_node()));
}

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

}  // namespace triad::parallel
