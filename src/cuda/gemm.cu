// Note [cuBLASLt GEMM] (gemm.h). Plans live in one map for the process, under a lock that
// also covers each call's enqueue: the per-call pointers (bias, GELU input) are attributes
// of the shared operation descriptor.
#include <cublasLt.h>

#include <array>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/gemm.h"
#include "cuda/runtime.h"
#include "cuda/stream.h"

namespace triad::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct PlanKey {
  int device;
  DType dtype, out_dtype;  // of the operands, of out
  bool trans_a, trans_b, b_batched, has_aux;
  Epilogue epilogue;
  int64_t batch, m, n, k;
  uint32_t align_a, align_b, align_c;
  auto tie() const {
    return std::tie(device, dtype, out_dtype, trans_a, trans_b, b_batched, has_aux, epilogue, batch, m, n, k, align_a,
                    align_b, align_c);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our b), B (our a), C = D
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

std::mutex g_mutex;
std::map<PlanKey, Plan> g_plans;  // never freed: plans serve the whole process
std::array<cublasLtHandle_t, kMaxDevices> g_handles{};
std::map<cudaStream_t, void*> g_workspaces;

cublasLtHandle_t handle(int device) {
  check_device_index(device);
  if (!g_handles[device]) TRIAD_CUBLAS_CHECK(cublasLtCreate(&g_handles[device]));
  return g_handles[device];
}

void* workspace(int device, cudaStream_t stream) {
  void*& w = g_workspaces[stream];
  if (!w) w = device_allocator(device).allocate_on(kWorkspaceBytes, stream);
  return w;
}

// The largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
uint32_t alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && u % a != 0) a /= 2;
  return a;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      TRIAD_ASSERT_MSG(false, "gemm: no cuBLASLt type for " << dtype_name(t));
  }
  return CUDA_R_32F;
}

cublasLtEpilogue_t lt_epilogue(Epilogue e, bool aux) {
  switch (e) {
    case Epilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu:
      return aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_GELU;
    case Epilogue::bias_gelu:
      return aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  TRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

template <class T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& v) {
  TRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  TRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), rows));
  if (batch > 1) {
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t(batch));
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return l;
}

std::string describe(const PlanKey& key) {
  std::ostringstream os;
  os << dtype_name(key.dtype) << " -> " << dtype_name(key.out_dtype) << " batch " << key.batch << " (" << key.m << " x "
     << key.k << ")" << (key.trans_a ? "^T" : "") << " @ (" << key.k << " x " << key.n << ")"
     << (key.trans_b ? "^T" : "") << ", epilogue " << int(key.epilogue) << ", alignments " << key.align_a << "/"
     << key.align_b << "/" << key.align_c;
  return os.str();
}

// Row-major out (M, N) = op(a) op(b) as column-major out^T (N, M) = op(b)^T op(a)^T.
Plan make_plan(const PlanKey& key) {
  Plan p;
  const cudaDataType_t type = cuda_type(key.dtype);
  TRIAD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p.op, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_desc(p.op, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(lt_epilogue(key.epilogue, key.has_aux)));
  if (key.has_aux) {
    set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(key.n));
    if (key.batch > 1) set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, int64_t(key.m * key.n));
  }
  const int64_t b_rows = key.trans_b ? key.k : key.n, b_cols = key.trans_b ? key.n : key.k;
  const int64_t a_rows = key.trans_a ? key.m : key.k, a_cols = key.trans_a ? key.k : key.m;
  p.a = make_layout(type, b_rows, b_cols, key.batch, key.b_batched ? key.k * key.n : 0);
  p.b = make_layout(type, a_rows, a_cols, key.batch, key.m * key.k);
  p.c = make_layout(cuda_type(key.out_dtype), key.n, key.m, key.batch, key.m * key.n);

  cublasLtMatmulPreference_t pref = nullptr;
  TRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  TRIAD_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t aligns[4] = {key.align_b, key.align_a, key.align_c, key.align_c};  // cuBLASLt's A, B, C, D
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    TRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof aligns[i]));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle(key.device), p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  TRIAD_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0,
              "gemm: cuBLASLt has no algorithm for " << describe(key) << " (" << cublasLtGetStatusString(st) << ")");
  p.algo = result.algo;
  p.workspace = result.workspaceSize;
  return p;
}

void check_operand(const Tensor& t, const char* what, Device device, DType dtype) {
  TRIAD_CHECK(t.defined(), "gemm: " << what << " is undefined");
  TRIAD_CHECK(
      t.device().is_cuda() && t.device() == device && t.dtype() == dtype,
      "gemm: " << what << " " << t.str() << " must be on " << device.str() << " with dtype " << dtype_name(dtype));
  TRIAD_CHECK(t.is_contiguous(), "gemm: " << what << " " << t.str() << " must be contiguous");
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch, int64_t m,
          int64_t n, int64_t k, const GemmOptions& options) {
  check_operand(a, "a", a.device(), a.dtype());
  check_operand(b, "b", a.device(), a.dtype());
  TRIAD_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::bf16 || a.dtype() == DType::f16,
              "gemm: operands must be f32, bf16 or f16, got " << a.str());
  // 16-bit operands may write an f32 output: cuBLASLt then skips the rounding to 16 bits.
  const DType out_dtype = out.defined() && out.dtype() == DType::f32 ? DType::f32 : a.dtype();
  check_operand(out, "out", a.device(), out_dtype);
  TRIAD_CHECK(batch >= 1 && m >= 0 && n >= 0 && k >= 0 && a.numel() == batch * m * k && out.numel() == batch * m * n &&
                  (b.numel() == k * n || b.numel() == batch * k * n),
              "gemm: " << a.str() << " @ " << b.str() << " -> " << out.str() << " does not match batch " << batch
                       << ", M " << m << ", N " << n << ", K " << k);
  const Epilogue ep = options.epilogue;
  const bool has_bias = ep == Epilogue::bias || ep == Epilogue::bias_gelu;
  const bool has_aux = options.pre_gelu.defined();
  if (has_bias) {
    check_operand(options.bias, "bias", a.device(), out_dtype);
    TRIAD_CHECK(options.bias.numel() == n,
                "gemm: bias " << options.bias.str() << " must have N = " << n << " elements");
  }
  if (has_aux) {
    TRIAD_CHECK(ep == Epilogue::gelu || ep == Epilogue::bias_gelu, "gemm: pre_gelu is an output of the GELU epilogues");
    check_operand(options.pre_gelu, "pre_gelu", a.device(), out_dtype);
    TRIAD_CHECK(options.pre_gelu.numel() == out.numel() && n % 8 == 0,
                "gemm: pre_gelu " << options.pre_gelu.str() << " must have out's " << out.numel()
                                  << " elements, with N (" << n << ") a multiple of 8");
  }
  if (out.numel() == 0) return;
  const int device = a.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  if (k == 0) {  // an empty sum: beta out, then the epilogue of zero
    TRIAD_CHECK(ep == Epilogue::none && (options.beta == 0.0 || options.beta == 1.0),
                "gemm: K = 0 with an epilogue or a beta other than 0 and 1");
    if (options.beta == 0.0) TRIAD_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), stream));
    return;
  }
  PlanKey key{device,
              a.dtype(),
              out_dtype,
              trans_a,
              trans_b,
              b.numel() != k * n || batch == 1,
              has_aux,
              ep,
              batch,
              m,
              n,
              k,
              alignment(a.raw_data()),
              alignment(b.raw_data()),
              alignment(out.raw_data())};
  if (has_aux) key.align_c = std::min(key.align_c, alignment(options.pre_gelu.raw_data()));
  if (key.batch > 1 && !key.b_batched && !trans_a) {  // one GEMM of batch * M rows
    key.m *= key.batch;
    key.batch = 1;
  }
  if (key.batch == 1) key.b_batched = true;  // no stride to speak of: one key for both
  const float alpha = float(options.alpha), beta = float(options.beta);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(key);
  if (it == g_plans.end()) it = g_plans.emplace(key, make_plan(key)).first;
  const Plan& p = it->second;
  if (has_bias) set_desc(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, options.bias.raw_data());
  if (has_aux) set_desc(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, options.pre_gelu.raw_data());
  TRIAD_CUBLAS_CHECK(cublasLtMatmul(handle(device), p.op, &alpha, b.raw_data(), p.a, a.raw_data(), p.b, &beta,
                                    out.raw_data(), p.c, out.raw_data(), p.c, &p.algo,
                                    p.workspace ? workspace(device, stream) : nullptr, p.workspace, stream));
}

Tensor linear_product(const Tensor& x, const Tensor& weight, const Tensor& out, const GemmOptions& options, bool fits) {
  const int64_t in = weight.size(1), n = weight.size(0), rows = in ? x.numel() / in : 0;
  if (fits) {
    gemm(x, weight, out, false, true, 1, rows, n, in, options);
    return Tensor();
  }
  const Tensor product = Tensor::empty(out.shape(), DType::f32, out.device());
  gemm(x, weight, product, false, true, 1, rows, n, in);
  return product;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu, Tensor* pre_gelu) {
  TRIAD_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
              "cuda::linear: input " << x.str() << " does not match weight " << weight.str());
  Shape shape = x.shape();
  shape.back() = weight.size(0);
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  GemmOptions o;
  o.bias = bias;
  o.epilogue =
      bias.defined() ? (gelu ? Epilogue::bias_gelu : Epilogue::bias) : (gelu ? Epilogue::gelu : Epilogue::none);
  if (gelu && pre_gelu) {
    *pre_gelu = Tensor::empty(shape, x.dtype(), x.device());
    o.pre_gelu = *pre_gelu;
  }
  linear_product(x, weight, y, o, /*fits=*/true);
  return y;
}

size_t gemm_plan_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_plans.size();
}

}  // namespace triad::cuda
