// `triad-bench quantized` (bench/quantized.h).
#include "bench/quantized.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/report.h"
#include "tensor/quantized_matmul.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `repeats` runs after one untimed run; the runs of the cases interleave
// so that they see the same state of a shared host.
std::vector<double> median_seconds(const std::vector<std::function<void()>>& cases, int repeats) {
  std::vector<std::vector<double>> times(cases.size());
  for (int round = 0; round <= repeats; ++round)
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto t0 = Clock::now();
      cases[c]();
      if (round > 0) times[c].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  std::vector<double> medians;
  for (const std::vector<double>& t : times) medians.push_back(app::median(t));
  return medians;
}

}  // namespace

int run_quantized_bench(const QuantizedOptions& o) {
  TRIAD_CHECK(!o.shapes.empty() && o.shapes.size() % 2 == 0,
              "triad-bench quantized: --shapes takes (K, N) pairs, got " << o.shapes.size() << " numbers");
  const int threads = app::set_threads(o.threads);
  std::printf("triad-bench quantized: %d threads, groups of %lld, integer kernel %s\n", threads,
              (long long)o.group_size, ops::has_int8_vnni() ? "avx512-vnni" : "portable");
  std::printf("%6s %6s %6s %10s %10s %10s %9s %9s\n", "M", "K", "N", "f32 TOPS", "W8A8 TOPS", "W4A8 TOPS", "W8A8 x",
              "W4A8 x");
  nlohmann::json rows = nlohmann::json::array();
  double f32_total = 0, w8_total = 0, w4_total = 0;
  Generator gen(1);
  for (size_t s = 0; s < o.shapes.size(); s += 2) {
    const int64_t k = o.shapes[s], n = o.shapes[s + 1];
    Tensor w = Tensor::empty({n, k}), bias = Tensor::zeros({n});
    ops::normal_(w, 0.0, 0.02, gen);
    const QuantFormat f8{8, o.group_size}, f4{4, o.group_size};
    const PackedWeight w8 = ops::pack_weight(ops::quantize_blocks(w, f8), n, k, f8);
    const PackedWeight w4 = ops::pack_weight(ops::quantize_blocks(w, f4), n, k, f4);
    for (int64_t m : o.tokens) {
      Tensor x = Tensor::empty({m, k});
      ops::normal_(x, 0.0, 1.0, gen);
      const std::vector<double> t =
          median_seconds({[&] { ops::linear(x, w, bias); }, [&] { ops::quantized_linear(x, w8, bias, 8); },
                          [&] { ops::quantized_linear(x, w4, bias, 8); }},
                         o.repeats);
      const double ops_count = 2.0 * double(m) * double(n) * double(k);
      std::printf("%6lld %6lld %6lld %10.3f %10.3f %10.3f %9.2f %9.2f\n", (long long)m, (long long)k, (long long)n,
                  ops_count / t[0] / 1e12, ops_count / t[1] / 1e12, ops_count / t[2] / 1e12, t[0] / t[1], t[0] / t[2]);
      f32_total += t[0], w8_total += t[1], w4_total += t[2];
      rows.push_back({{"m", m},
                      {"k", k},
                      {"n", n},
                      {"f32_tops", ops_count / t[0] / 1e12},
                      {"w8a8_tops", ops_count / t[1] / 1e12},
                      {"w4a8_tops", ops_count / t[2] / 1e12},
                      {"w8a8_speedup", t[0] / t[1]},
                      {"w4a8_speedup", t[0] / t[2]}});
    }
  }
  std::printf("all shapes: W8A8 %.2fx, W4A8 %.2fx the f32 GEMM's time\n", f32_total / w8_total, f32_total / w4_total);
  app::print_json_line({{"bench", "quantized"},
                        {"threads", threads},
                        {"group_size", o.group_size},
                        {"kernel", ops::has_int8_vnni() ? "avx512-vnni" : "portable"},
                        {"w8a8_speedup", f32_total / w8_total},
                        {"w4a8_speedup", f32_total / w4_total},
                        {"rows", rows}});
  return 0;
}

}  // namespace triad::bench
