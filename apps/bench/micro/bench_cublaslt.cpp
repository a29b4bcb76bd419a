// bench-cublaslt: triad's cuBLASLt GEMM (cuda::gemm, with its plan cache and workspace)
// against a direct cuBLASLt call of the same shape in the same run: descriptors made and
// the heuristic asked once, then cublasLtMatmul in a loop. The difference is what the
// wrapper costs per call. Shapes are the GEMMs of a GPT-2 small training step
// (B T = 8192 tokens, C = 768, vocabulary padded to 50304) and large squares, in f32
// (fp32 compute) and bf16 (fp32 accumulation). Both results are compared before timing.
//
//   bench-cublaslt [--iters N] [--warmup N] [--dtype f32|bf16|all]
//
// Prints a table, then one JSON object as its last line. Without a GPU it says so (and
// the JSON says "skipped").
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/gemm.h"
#include "cuda/runtime.h"
#include "cuda/stream.h"
#include "cuda/transfer.h"
#include "tensor/ops.h"

using namespace triad;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "error: %s: %s\n", what, cublasLtGetStatusString(s));
    std::exit(1);
  }
}

struct Shape3 {
  const char* name;
  int64_t m, n, k;  // out (M, N) = x (M, K) @ w (N, K)^T, as a linear layer
};

// The same product, called directly: out^T = w x^T in cuBLASLt's column-major terms.
class DirectGemm {
 public:
  DirectGemm(cudaDataType_t type, int64_t m, int64_t n, int64_t k) {
    check(cublasLtCreate(&handle_), "cublasLtCreate");
    check(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const int32_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "TRANSA");
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt), "TRANSB");
    check(cublasLtMatrixLayoutCreate(&a_, type, uint64_t(k), uint64_t(n), k), "layout A");
    check(cublasLtMatrixLayoutCreate(&b_, type, uint64_t(k), uint64_t(m), k), "layout B");
    check(cublasLtMatrixLayoutCreate(&c_, type, uint64_t(n), uint64_t(m), n), "layout C");
    check(cudaMalloc(&workspace_, kWorkspace), "cudaMalloc workspace");
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t ws = kWorkspace;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
          "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_, op_, a_, b_, c_, c_, pref, 1, &result, &found), "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
      std::fprintf(stderr, "error: cuBLASLt found no algorithm\n");
      std::exit(1);
    }
    algo_ = result.algo;
    ws_size_ = result.workspaceSize;
  }
  ~DirectGemm() {
    cudaFree(workspace_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatmulDescDestroy(op_);
    cublasLtDestroy(handle_);
  }
  void run(const void* x, const void* w, void* out, cudaStream_t stream) {
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasLtMatmul(handle_, op_, &alpha, w, a_, x, b_, &beta, out, c_, out, c_, &algo_, workspace_, ws_size_,
                         stream),
          "cublasLtMatmul");
  }

 private:
  static constexpr size_t kWorkspace = size_t(32) << 20;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  void* workspace_ = nullptr;
  size_t ws_size_ = 0;
};

// Milliseconds per call of f over `iters` calls on `stream`, after `warmup` calls.
template <class F>
double time_ms(F&& f, int warmup, int iters, cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) f();
  cuda::Event start(cuda::current_device(), true), stop(cuda::current_device(), true);
  start.record(stream);
  for (int i = 0; i < iters; ++i) f();
  stop.record(stream);
  stop.synchronize();
  return double(start.elapsed_ms(stop)) / iters;
}

double max_relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = ops::to(cuda::to_host(a), DType::f32).to_vector<float>();
  const std::vector<float> y = ops::to(cuda::to_host(b), DType::f32).to_vector<float>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, double(std::fabs(x[i] - y[i])));
    scale = std::max(scale, double(std::fabs(y[i])));
  }
  return diff / scale;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 50, warmup = 10;
  std::string which = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc)
      warmup = std::atoi(argv[++i]);
    else if (a == "--dtype" && i + 1 < argc)
      which = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench-cublaslt [--iters N] [--warmup N] [--dtype f32|bf16|all]\n");
      return 2;
    }
  }
  if (iters < 1 || warmup < 0 || (which != "f32" && which != "bf16" && which != "all")) {
    std::fprintf(stderr, "error: --iters must be >= 1, --warmup >= 0, --dtype f32, bf16 or all\n");
    return 2;
  }
  if (cuda::device_count() == 0) {
    std::printf(
        "no CUDA device: nothing to benchmark\n{\"benchmark\": \"cublaslt\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  std::printf("%s", cuda::describe_devices().c_str());

  const std::vector<Shape3> shapes = {{"qkv", 8192, 2304, 768},         {"attn_proj", 8192, 768, 768},
                                      {"fc", 8192, 3072, 768},          {"fc_proj", 8192, 768, 3072},
                                      {"lm_head", 8192, 50304, 768},    {"square_4096", 4096, 4096, 4096},
                                      {"square_8192", 8192, 8192, 8192}};
  std::vector<DType> dtypes;
  if (which != "bf16") dtypes.push_back(DType::f32);
  if (which != "f32") dtypes.push_back(DType::bf16);

  const Device gpu = Device::cuda(0);
  const cudaStream_t stream = cuda::current_stream(0);
  std::printf("%-12s %-5s %6s %6s %6s %10s %10s %9s %9s %7s %9s\n", "gemm", "dtype", "M", "N", "K", "triad ms",
              "direct ms", "triad TF", "direct TF", "ratio", "max diff");
  std::string json =
      "{\"benchmark\": \"cublaslt\", \"device\": \"cuda:0\", \"iters\": " + std::to_string(iters) + ", \"results\": [";
  bool first = true;
  for (DType dt : dtypes)
    for (const Shape3& s : shapes) {
      Tensor x = Tensor::empty({s.m, s.k}, DType::f32, gpu), w = Tensor::empty({s.n, s.k}, DType::f32, gpu);
      ops::uniform_(x, -1, 1);
      ops::uniform_(w, -1, 1);
      x = ops::to(x, dt);
      w = ops::to(w, dt);
      Tensor out_triad = Tensor::empty({s.m, s.n}, dt, gpu), out_direct = Tensor::empty({s.m, s.n}, dt, gpu);
      DirectGemm direct(dt == DType::f32 ? CUDA_R_32F : CUDA_R_16BF, s.m, s.n, s.k);
      auto run_triad = [&] { cuda::gemm(x, w, out_triad, false, true, 1, s.m, s.n, s.k); };
      auto run_direct = [&] { direct.run(x.raw_data(), w.raw_data(), out_direct.raw_data(), stream); };
      run_triad();
      run_direct();
      const double diff = max_relative_difference(out_triad, out_direct);
      const double t_ms = time_ms(run_triad, warmup, iters, stream);
      const double d_ms = time_ms(run_direct, warmup, iters, stream);
      const double flop = 2.0 * double(s.m) * double(s.n) * double(s.k);
      const double t_tf = flop / (t_ms * 1e-3) / 1e12, d_tf = flop / (d_ms * 1e-3) / 1e12;
      std::printf("%-12s %-5s %6lld %6lld %6lld %10.4f %10.4f %9.1f %9.1f %7.3f %9.2e\n", s.name, dtype_name(dt),
                  (long long)s.m, (long long)s.n, (long long)s.k, t_ms, d_ms, t_tf, d_tf, t_ms / d_ms, diff);
      char row[512];
      std::snprintf(
          row, sizeof row,
          "%s{\"gemm\": \"%s\", \"dtype\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"triad_ms\": %.5f, "
          "\"direct_ms\": %.5f, \"triad_tflops\": %.2f, \"direct_tflops\": %.2f, \"max_rel_diff\": %.3e}",
          first ? "" : ", ", s.name, dtype_name(dt), (long long)s.m, (long long)s.n, (long long)s.k, t_ms, d_ms, t_tf,
          d_tf, diff);
      json += row;
      first = false;
    }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}
