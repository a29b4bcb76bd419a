// The top of every program: runs `body`, and turns an escaping exception into one line on
// stderr (DESIGN.md, Conventions):
// - single-process (MPI not initialized): "error: <message>", exit status 1;
// - multi-rank (parallel::init was called): "rank R: error: <message>", then the whole job
//   is aborted (MPI_Abort, exit status 1) so that the other ranks never hang waiting for
//   this one, after waiting a moment for other ranks that meet an error too to print
//   theirs (parallel::end_failing_rank, Note [A failing rank's end] in parallel/runtime.h).
//   When body returns normally under MPI, MPI is finalized before returning.
#pragma once

#include <functional>

namespace triad::app {

int guarded_main(const std::function<int()>& body);

}  // namespace triad::app
