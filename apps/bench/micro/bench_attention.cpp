// bench-attention: the CUDA backend's fused causal attention (ops::causal_attention and
// its backward) at GPT-2 small's shapes, B = 16, NH = 12, T = 1024, hs = 64, in bf16 (and
// f16, f32 on request; bf16 and f16 run on tensor cores, f32 on FMAs: attention_mma.cu,
// attention.cu), forward and backward, beside the composed attention the model used
// before (cuBLASLt matmul, causal softmax, matmul, and their backward; f32 only, as the
// backend's matmul) on the same values in f32. FLOPs count the causal half of the
// products: 4 B NH T^2 hs / 2 forward, 2.5 times that backward (5 products instead of 2),
// for both. The fused output is compared with the composed one in the same run
// (normalized MSE, sum (got - want)^2 / sum want^2).
//
//   bench-attention [--iters N] [--warmup N] [--dtype bf16|f16|f32|all]
//                   [--batch B] [--heads NH] [--seq T] [--head-size hs]
//
// Prints a table, then one JSON object as its last line. Without a GPU it says so (and
// the JSON says "skipped").
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/runtime.h"
#include "cuda/stream.h"
#include "cuda/transfer.h"
#include "tensor/ops.h"

using namespace triad;

namespace {

// Milliseconds per call of f over `iters` calls, after `warmup` calls.
template <class F>
double time_ms(F&& f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  const int device = cuda::current_device();
  const cuda::StreamHandle stream = cuda::current_stream(device);
  cuda::Event start(device, true), stop(device, true);
  start.record(stream);
  for (int i = 0; i < iters; ++i) f();
  stop.record(stream);
  stop.synchronize();
  return double(start.elapsed_ms(stop)) / iters;
}

double nmse(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = ops::to(cuda::to_host(got), DType::f64).to_vector<double>();
  const std::vector<double> w = ops::to(cuda::to_host(want), DType::f64).to_vector<double>();
  double err = 0, ref = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err += (g[i] - w[i]) * (g[i] - w[i]);
    ref += w[i] * w[i];
  }
  return err / std::max(ref, 1e-300);
}

struct Composed {
  Tensor att, out;  // probabilities (B, NH, T, T), output (B, NH, T, hs)
};

Composed composed_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const Tensor att = ops::softmax(ops::mul(ops::matmul(q, k, false, true), scale), /*causal=*/true);
  return {att, ops::matmul(att, v)};
}

// The gradients of q, k, v as the composed ops' backward computes them.
std::vector<Tensor> composed_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& att,
                                      const Tensor& grad, double scale) {
  const Tensor datt = ops::matmul(grad, v, false, true);
  const Tensor ds = ops::mul(ops::softmax_backward(att, datt), scale);
  return {ops::matmul(ds, k), ops::matmul(ds, q, true, false), ops::matmul(att, grad, true, false)};
}

void usage() {
  std::fprintf(stderr,
               "usage: bench-attention [--iters N] [--warmup N] [--dtype bf16|f16|f32|all] [--batch B] [--heads NH] "
               "[--seq T] [--head-size hs]\n");
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20, warmup = 5;
  int64_t batch = 16, heads = 12, seq = 1024, hs = 64;
  std::string which = "bf16";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--iters" && has_value)
      iters = std::atoi(argv[++i]);
    else if (a == "--warmup" && has_value)
      warmup = std::atoi(argv[++i]);
    else if (a == "--dtype" && has_value)
      which = argv[++i];
    else if (a == "--batch" && has_value)
      batch = std::atoll(argv[++i]);
    else if (a == "--heads" && has_value)
      heads = std::atoll(argv[++i]);
    else if (a == "--seq" && has_value)
      seq = std::atoll(argv[++i]);
    else if (a == "--head-size" && has_value)
      hs = std::atoll(argv[++i]);
    else {
      usage();
      return 2;
    }
  }
  if (iters < 1 || warmup < 0 || batch < 1 || heads < 1 || seq < 1 || hs < 1 ||
      (which != "bf16" && which != "f16" && which != "f32" && which != "all")) {
    std::fprintf(stderr,
                 "error: --iters, --batch, --heads, --seq and --head-size must be >= 1, --warmup >= 0, --dtype bf16, "
                 "f16, f32 or all\n");
    return 2;
  }
  if (cuda::device_count() == 0) {
    std::printf(
        "no CUDA device: nothing to benchmark\n{\"benchmark\": \"attention\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  std::printf("%s", cuda::describe_devices().c_str());

  std::vector<DType> dtypes;
  if (which == "bf16" || which == "all") dtypes.push_back(DType::bf16);
  if (which == "f16" || which == "all") dtypes.push_back(DType::f16);
  if (which == "f32" || which == "all") dtypes.push_back(DType::f32);

  const Device gpu = Device::cuda(0);
  const Shape shape = {batch, heads, seq, hs};
  const double scale = 1.0 / std::sqrt(double(hs));
  const double fwd_flop = 4.0 * double(batch * heads) * double(seq) * double(seq) * double(hs) / 2.0;
  const double bwd_flop = 2.5 * fwd_flop;
  auto tflops = [](double flop, double ms) { return flop / (ms * 1e-3) / 1e12; };

  std::printf("B %lld, NH %lld, T %lld, hs %lld: %.1f GFLOP forward, %.1f GFLOP backward (causal)\n", (long long)batch,
              (long long)heads, (long long)seq, (long long)hs, fwd_flop / 1e9, bwd_flop / 1e9);
  std::printf("%-9s %-5s %10s %10s %10s %10s %10s\n", "attention", "dtype", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s",
              "nmse");
  std::string json = "{\"benchmark\": \"attention\", \"device\": \"cuda:0\", \"batch\": " + std::to_string(batch) +
                     ", \"heads\": " + std::to_string(heads) + ", \"seq\": " + std::to_string(seq) +
                     ", \"head_size\": " + std::to_string(hs) + ", \"iters\": " + std::to_string(iters) +
                     ", \"results\": [";
  // err < 0: the row is the reference.
  auto add_row = [&](const char* kind, DType dt, double f_ms, double b_ms, double err) {
    char e[32] = "reference", je[32] = "null";
    if (err >= 0) {
      std::snprintf(e, sizeof e, "%.2e", err);
      std::snprintf(je, sizeof je, "%.3e", err);
    }
    std::printf("%-9s %-5s %10.3f %10.2f %10.3f %10.2f %10s\n", kind, dtype_name(dt), f_ms, tflops(fwd_flop, f_ms),
                b_ms, tflops(bwd_flop, b_ms), e);
    char row[400];
    std::snprintf(row, sizeof row,
                  "%s{\"kind\": \"%s\", \"dtype\": \"%s\", \"fwd_ms\": %.4f, \"fwd_tflops\": %.3f, \"bwd_ms\": %.4f, "
                  "\"bwd_tflops\": %.3f, \"nmse_vs_composed\": %s}",
                  json.back() == '[' ? "" : ", ", kind, dtype_name(dt), f_ms, tflops(fwd_flop, f_ms), b_ms,
                  tflops(bwd_flop, b_ms), je);
    json += row;
  };

  for (DType dt : dtypes) {
    Tensor q = Tensor::empty(shape, DType::f32, gpu), k = Tensor::empty(shape, DType::f32, gpu),
           v = Tensor::empty(shape, DType::f32, gpu), grad = Tensor::empty(shape, DType::f32, gpu);
    for (Tensor* t : {&q, &k, &v, &grad}) ops::uniform_(*t, -1, 1);
    q = ops::to(q, dt), k = ops::to(k, dt), v = ops::to(v, dt), grad = ops::to(grad, dt);

    // The reference on the same (rounded) values, in f32.
    const Tensor q32 = ops::to(q, DType::f32), k32 = ops::to(k, DType::f32), v32 = ops::to(v, DType::f32);
    const Tensor want = composed_forward(q32, k32, v32, scale).out;
    const ops::AttentionOut r = ops::causal_attention(q, k, v, scale);
    const double err = nmse(ops::to(r.out, DType::f32), want);

    const double f_ms = time_ms([&] { ops::causal_attention(q, k, v, scale); }, warmup, iters);
    const double b_ms =
        time_ms([&] { ops::causal_attention_backward(q, k, v, r.out, r.lse, grad, scale); }, warmup, iters);
    add_row("fused", dt, f_ms, b_ms, err);
  }

  // The composed attention in f32 for scale (its (B, NH, T, T) probabilities must fit).
  {
    Tensor q = Tensor::empty(shape, DType::f32, gpu), k = Tensor::empty(shape, DType::f32, gpu),
           v = Tensor::empty(shape, DType::f32, gpu), grad = Tensor::empty(shape, DType::f32, gpu);
    for (Tensor* t : {&q, &k, &v, &grad}) ops::uniform_(*t, -1, 1);
    const Composed c = composed_forward(q, k, v, scale);
    const double f_ms = time_ms([&] { composed_forward(q, k, v, scale); }, warmup, iters);
    const double b_ms = time_ms([&] { composed_backward(q, k, v, c.att, grad, scale); }, warmup, iters);
    add_row("composed", DType::f32, f_ms, b_ms, -1.0);
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}
