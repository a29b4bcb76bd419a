// GEMM throughput of ops::matmul at the shapes of a GPT-2 124M training step (batch 4 x
// sequence 64 = 256 rows), next to the machine's measured fp32 peak: a loop of independent
// fused multiply-adds on every thread, which no GEMM can beat.
//
//   build/bin/bench-gemm --benchmark_min_time=0.5
//
// Counters: GFLOPs = 2 M N K per second / 1e9.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include "tensor/ops.h"

using namespace triad;

namespace {

void BM_matmul(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool trans_a = state.range(3) & 1, trans_b = state.range(3) & 2;
  Tensor a = Tensor::empty(trans_a ? Shape{k, m} : Shape{m, k}), b = Tensor::empty(trans_b ? Shape{n, k} : Shape{k, n});
  ops::uniform_(a, -1, 1);
  ops::uniform_(b, -1, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(a, b, trans_a, trans_b).raw_data());
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * double(m * n * k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The trans code: bit 0 = A transposed, bit 1 = B transposed. Linear forward is A B^T (2),
// its input gradient A B (0), its weight gradient A^T B (1).
void gpt2_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "trans"});
  const int64_t rows = 256, C = 768, V = 50257;
  for (int64_t out : {3 * C, C, 4 * C}) {  // attn.qkv, attn.proj, mlp.fc (input C)
    b->Args({rows, out, C, 2});            // forward
    b->Args({rows, C, out, 0});            // input gradient
    b->Args({out, C, rows, 1});            // weight gradient
  }
  b->Args({rows, C, 4 * C, 2});  // mlp.proj forward
  b->Args({rows, V, C, 2});      // tied head forward
  b->Args({rows, C, V, 0});      // head input gradient
  b->Args({V, C, rows, 1});      // head weight gradient
}

BENCHMARK(BM_matmul)->Apply(gpt2_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();

#if defined(__FMA__) && defined(__AVX2__)
// Ten independent 8-wide FMA chains per thread keep both FMA pipes full.
void BM_fma_peak(benchmark::State& state) {
  const int64_t iters = 1 << 22;
  int threads = 1;
  for (auto _ : state) {
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
      threads = omp_get_num_threads();
      __m256 acc[10];
      for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
      const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
      for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
      __m256 s = acc[0];
      for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, acc[i]);
      float out[8];
      _mm256_storeu_ps(out, s);
      sink += out[0];
    }
    benchmark::DoNotOptimize(sink);
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(double(iters) * 10 * 8 * 2 * threads / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
BENCHMARK(BM_fma_peak)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();
