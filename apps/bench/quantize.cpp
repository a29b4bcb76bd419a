#include "bench/quantize.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>

#include "common/report.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

// One timed operation: what it is, the bytes it reads and writes, and the call.
struct Case {
  std::string op;
  int bits;  // 0 for the stream kernels
  double bytes;
  std::function<void()> run;
};

// Each case's median time over `repeats` rounds, after an untimed round (first touch of
// the outputs, the allocator's bins). A round runs every case once, so the stream kernels
// and the quantization kernels see the same machine: on a shared host the bandwidth drifts
// from second to second, and interleaving keeps it out of their ratios.
std::vector<double> median_seconds(const std::vector<Case>& cases, int repeats) {
  std::vector<std::vector<double>> times(cases.size());
  for (int round = 0; round <= repeats; ++round)
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto t0 = Clock::now();
      cases[c].run();
      if (round > 0) times[c].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  std::vector<double> medians;
  for (const std::vector<double>& t : times) medians.push_back(app::median(t));
  return medians;
}

}  // namespace

QuantizeFigures measure_quantize(const QuantizeOptions& o) {
  QuantizeFigures fig;
  fig.threads = app::set_threads(o.threads);
  const int64_t n = o.elements, k = o.slices;
  std::vector<Case> cases;

  // STREAM's copy and triad over arrays of n doubles, each thread touching first the part
  // it works on later (as STREAM does); bytes as STREAM counts them (no write-allocate reads).
  const std::unique_ptr<double[]> a(new double[size_t(n)]), b(new double[size_t(n)]), c(new double[size_t(n)]);
  double *pa = a.get(), *pb = b.get(), *pc = c.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.0;
  }
  cases.push_back({"stream_copy", 0, 16.0 * double(n), [=] {
#pragma omp parallel for schedule(static)
                     for (int64_t i = 0; i < n; ++i) pc[i] = pa[i];
                   }});
  cases.push_back({"stream_triad", 0, 24.0 * double(n), [=] {
#pragma omp parallel for schedule(static)
                     for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0 * pc[i];
                   }});

  const DType dtype = dtype_from_name(o.dtype);
  const double value_bytes = double(n) * double(element_size(dtype));
  Tensor x = Tensor::empty({n}, dtype), out = Tensor::empty({n}, dtype);
  ops::uniform_(x, -1.0, 1.0);
  std::vector<Quantized> results(2);  // what the timed quantize calls return, per format
  for (int bits : {8, 4}) {
    const QuantFormat f{bits, o.block};
    const double packed_bytes = double(f.bytes(n)) + 4.0 * double(f.blocks(n));  // q and scales
    Quantized& result = results[bits == 8 ? 0 : 1];
    cases.push_back({"quantize", bits, value_bytes + packed_bytes, [&result, x, f] {
                       result = {};  // freed first, so the allocator hands the same bytes back
                       result = ops::quantize_blocks(x, f);
                     }});
    const Quantized q = ops::quantize_blocks(x, f);
    cases.push_back({"dequantize", bits, packed_bytes + value_bytes,
                     [q, out, f] { ops::dequantize_blocks(q.q, q.scales, out, f); }});
    // k slices (copies of q: the kernel's speed does not depend on the values).
    Tensor qk = Tensor::empty({k, f.bytes(n)}, DType::i8), sk = Tensor::empty({k, f.blocks(n)});
    for (int64_t j = 0; j < k; ++j) {
      ops::copy_(ops::select(qk, 0, j), q.q);
      ops::copy_(ops::select(sk, 0, j), q.scales);
    }
    cases.push_back({"dequantize_reduce", bits, double(k) * packed_bytes + value_bytes,
                     [qk, sk, out, f] { ops::dequantize_reduce(qk, sk, out, f); }});
  }

  const std::vector<double> seconds = median_seconds(cases, o.repeats);
  fig.stream_copy_gb_per_s = cases[0].bytes / seconds[0] / 1e9;
  fig.stream_triad_gb_per_s = cases[1].bytes / seconds[1] / 1e9;
  fig.stream_gb_per_s = std::max(fig.stream_copy_gb_per_s, fig.stream_triad_gb_per_s);
  for (size_t i = 2; i < cases.size(); ++i) {
    const double rate = cases[i].bytes / seconds[i] / 1e9;
    fig.kernels.push_back({cases[i].op, cases[i].bits, seconds[i], cases[i].bytes, rate, rate / fig.stream_gb_per_s});
  }
  return fig;
}

void print_quantize_table(const QuantizeFigures& fig) {
  std::printf("stream: copy %.1f GB/s, triad %.1f GB/s (%d threads)\n", fig.stream_copy_gb_per_s,
              fig.stream_triad_gb_per_s, fig.threads);
  std::printf("%-18s %4s %10s %10s %10s\n", "op", "bits", "ms", "GB/s", "of stream");
  for (const QuantizeFigures::Kernel& k : fig.kernels)
    std::printf("%-18s %4d %10.2f %10.1f %10.2f\n", k.op.c_str(), k.bits, k.seconds * 1e3, k.gb_per_s, k.fraction);
}

nlohmann::json quantize_json(const QuantizeOptions& o, const QuantizeFigures& fig) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const QuantizeFigures::Kernel& k : fig.kernels)
    kernels.push_back({{"op", k.op},
                       {"bits", k.bits},
                       {"ms", k.seconds * 1e3},
                       {"bytes", k.bytes},
                       {"gb_per_s", k.gb_per_s},
                       {"fraction_of_stream", k.fraction}});
  return {{"bench", "quantize"},
          {"elements", o.elements},
          {"block", o.block},
          {"dtype", o.dtype},
          {"slices", o.slices},
          {"threads", fig.threads},
          {"repeats", o.repeats},
          {"stream_copy_gb_per_s", fig.stream_copy_gb_per_s},
          {"stream_triad_gb_per_s", fig.stream_triad_gb_per_s},
          {"stream_gb_per_s", fig.stream_gb_per_s},
          {"kernels", kernels}};
}

int run_quantize_bench(const QuantizeOptions& o) {
  std::printf("triad-bench quantize: %lld %s values, blocks of %lld, %d slices to reduce\n", (long long)o.elements,
              o.dtype.c_str(), (long long)o.block, o.slices);
  const QuantizeFigures fig = measure_quantize(o);
  print_quantize_table(fig);
  app::print_json_line(quantize_json(o, fig));
  return 0;
}

}  // namespace triad::bench
