// `triad-bench quantize`: the block quantization kernels ZeRO++ runs around its collectives
// (ops::quantize_blocks, dequantize_blocks, dequantize_reduce) on the cpu, against this
// machine's memory bandwidth measured in the same run.
//
// The bandwidth is STREAM's: copy (c = a) and triad (a = b + s c) over three arrays of
// doubles far larger than the last-level cache, one OpenMP thread per core, the larger of
// the two medians. Each kernel's rate is the bytes it reads and writes (values, packed
// integers and scales) over its median time, and is printed as a fraction of that
// bandwidth: memory-bound kernels should stay near it. Every operation runs once per round,
// stream kernels included, so all see the same state of a host whose bandwidth drifts.
// measure_quantize is the whole measurement, so other benchmarks can print the same
// figures.
#pragma once

#include "common/cli_app.h"
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace triad::bench {

struct QuantizeOptions {
  int64_t elements = int64_t(1) << 25;  // values quantized (f32: 128 MiB, four times a 32 MiB cache)
  int64_t block = kQuantBlock;
  int slices = 4;             // k of dequantize_reduce: slices of `elements` values summed
  std::string dtype = "f32";  // of the values: f32, bf16 or f16
  int threads = 0;            // OpenMP threads (0: one per core)
  int repeats = 10;           // timed runs of each kernel; figures are medians
};

struct QuantizeFigures {
  struct Kernel {
    std::string op;  // quantize, dequantize, dequantize_reduce
    int bits;
    double seconds;   // median
    double bytes;     // read + written per run
    double gb_per_s;  // bytes / seconds / 1e9
    double fraction;  // of stream_gb_per_s
  };
  int threads = 0;
  double stream_copy_gb_per_s = 0, stream_triad_gb_per_s = 0;
  double stream_gb_per_s = 0;  // the larger of the two
  std::vector<Kernel> kernels;
};

QuantizeFigures measure_quantize(const QuantizeOptions& options);
void print_quantize_table(const QuantizeFigures& figures);
nlohmann::json quantize_json(const QuantizeOptions& options, const QuantizeFigures& figures);

void add_quantize_command(CLI::App& app, QuantizeOptions& options);
int run_quantize_bench(const QuantizeOptions& options);

}  // namespace triad::bench
