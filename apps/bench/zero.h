// `triad-bench zero`: the cost of the ZeRO stages against plain data parallelism (stage 0).
//
// The parent process (run without mpirun) loops over ranks x stages and, for each pair,
// runs this program under `mpirun -np N --oversubscribe --bind-to none <self> zero
// --worker --stage S ...`. Each worker trains the same model through engine::Engine on a
// fixed random global batch (rank r takes rows [r*B/n, (r+1)*B/n)), times forward +
// backward + step per step (max over ranks, median over the timed steps) and rank 0 prints
// one JSON line. The parent prints one table row per worker and, as its last line, one
// JSON object with every row and, per rank count, each stage's step time over stage 0's.
// A worker that fails makes the parent fail with the worker's error.
//
// --zeropp adds ZeRO++ rows (Note [ZeRO++] in zero/zero_optimizer.h) beside stage 3 on each
// rank count: qwz (int8 forward gathers), hpz (secondary partition over a node), qgz (int4
// two-hop gradient reduction), all (the three). Every run then emulates nodes of
// --ranks-per-node ranks (cluster.ranks_per_node), so each row splits its bus bytes into
// intra- and inter-node and ZeRO++ rows show their inter-node bytes over stage 3's; the
// parent also measures the quantization kernels (bench/quantize.h), at the weights' and the
// gradients' block sizes, against this machine's memory bandwidth.
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct ZeroOptions {
  std::string model = "tiny";
  std::string config;                  // a triad-train config: its model, optimizer, clipping, zero keys
  std::vector<std::string> overrides;  // --set dotted.key=value on that config (or on the preset's)
  std::vector<int> ranks = {1, 2, 4};
  std::vector<int> stages = {0, 1, 2, 3};  // passed on to the config's zero_optimization.stage
  int64_t batch = 16;                      // global, sequences; divisible by every rank count
  int64_t seq = 64;
  int threads = 0;  // OpenMP threads per rank (0: cores / ranks on the node, at least 1)
  int steps = 10;
  int warmup = 2;
  std::vector<std::string> zeropp;  // ZeRO++ variants: qwz, hpz, qgz, all
  int ranks_per_node = 2;           // emulated node size when zeropp is given
  // Internal: set on the processes the parent starts under mpirun.
  bool worker = false;
  int stage = 0;
  std::string variant;  // the worker's ZeRO++ variant ("": none)
};

void add_zero_command(CLI::App& app, ZeroOptions& options);
int run_zero_bench(const ZeroOptions& options);

}  // namespace triad::bench
