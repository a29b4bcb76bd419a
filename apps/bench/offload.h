// `triad-bench offload`: what ZeRO-Offload's and ZeRO-Infinity's NVMe swapping costs on this
// machine. The swap file's whole-buffer write and read (io/swap_file.h, the aio settings
// given) against a raw O_DIRECT pwrite/pread of the same bytes, in blocks of block_size, in
// the same folder and run; then the time of a training step of a small GPT at ZeRO stage 3
// with the optimizer's state and the parameters on NVMe against the same step in memory,
// and with the optimizer's state alone on NVMe, with and without the delayed parameter
// update (Note [Delayed parameter update]), which overlaps the update with the next step.
#pragma once

#include "common/cli_app.h"
#include <cstdint>
#include <string>

#include "io/swap_file.h"

namespace triad::bench {

struct OffloadBenchOptions {
  std::string dir = "/tmp";       // the folder the files go in (nvme_path)
  int64_t megabytes = 256;        // bytes moved by each transfer
  int repeats = 3;                // timed transfers of each kind; figures are medians
  io::AioConfig aio;              // block_size, queue_depth, intra_op_parallelism
  int steps = 5;                  // timed steps of each run, after one untimed
  int64_t n_layer = 4, d_model = 256;
  int threads = 0;                // OpenMP threads (0: one per core)
};

void add_offload_command(CLI::App& app, OffloadBenchOptions& options);
int run_offload_bench(const OffloadBenchOptions& options);

}  // namespace triad::bench
