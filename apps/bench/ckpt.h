// `triad-bench ckpt`: checkpoint I/O (checkpoint/checkpoint.h) against plain file I/O of the
// same number of bytes, in the same run.
//
// The parent process (run without mpirun) makes a fresh folder inside --dir (default: the
// system temp dir), and for each rank count runs this program under `mpirun -np N
// --oversubscribe --bind-to none <self> ckpt --worker ...` (bench/workers.h). Each worker
// builds an engine::Engine for the preset (ZeRO stage 1 on more than one rank, so the
// optimizer state is sharded; stage 0 on one), takes one optimizer step on a tiny random
// batch so the moments are not zero, and then, --warmup untimed and --repeats timed times:
//   1. save_checkpoint (HDF5 over MPI-IO, checksums, fsync and rename),
//   2. load_checkpoint (checksums verified) into an engine whose state was zeroed first,
//      checked to restore exactly the state saved,
//   3. a plain write of the checkpoint file's byte count: each rank pwrites its share
//      (bytes / n, large calls) at its offset into one shared file, then fsyncs,
//   4. a plain read of that file: each rank preads its share back.
// Each is timed from a barrier to the slowest rank's end. The warm-up round keeps first-use
// costs out of the figures (e.g. a virtual disk allocating blocks never written before,
// which the checkpoint, written first in each round, would pay alone). Before each read (2 and 4) the
// file's pages are dropped from the page cache (posix_fadvise DONTNEED after the fsync), so
// both reads come from storage; --cached keeps them for both instead. Rank 0 prints
// progress lines and one JSON line with the medians; the parent prints a table (GB/s and
// the checkpoint/plain ratios per rank count) and, as its last line, one JSON object with
// every row and the worst ratio. The folder is removed afterwards.
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct CkptOptions {
  std::string model = "gpt2-124m";
  std::vector<int> ranks = {1, 4};
  std::string dir;  // where the working folder is made (empty: the system temp dir)
  int repeats = 3;
  int warmup = 1;       // untimed rounds first
  int threads = 0;      // OpenMP threads per rank (0: cores / ranks on the node, at least 1)
  bool cached = false;  // reads may hit the page cache (both paths); default: dropped first
  // Internal: set on the processes the parent starts under mpirun (dir is then the
  // working folder itself).
  bool worker = false;
};

void add_ckpt_command(CLI::App& app, CkptOptions& options);
int run_ckpt_bench(const CkptOptions& options);

}  // namespace triad::bench
