// GEMM through cuBLASLt (cuda/gemm.h), and ops::linear's product with its bias in
// cuBLASLt's bias epilogue (tensor/cpu/matmul.cpp on the GPU). matmul takes f32, bf16 or f16 operands and a result
// of their dtype (16-bit products accumulate in f32 on tensor cores and round once: Note
// [16-bit activations] in autograd/functions.cpp).
//
// Note [Grouped GEMM on the GPU]: ops::grouped_matmul's groups (an MoE layer's experts)
// are products of one shape whose operands lie anywhere (each expert's weight is a
// parameter of its own), which cuBLAS's pointer-array batched GEMM (cublasGemmBatchedEx)
// runs in one call. The arrays of device pointers are written on the device by a kernel
// that receives them as its argument (as the multi-tensor optimizer's tables travel: no
// host-to-device copy, nothing for a CUDA graph to miss), kPointerGroups groups a launch,
// into a buffer from the stream-ordered allocator that the GEMM after it on the stream
// reads. Compute type and layout as Note [cuBLASLt GEMM]: fp32 accumulation (no TF32),
// row-major products as their column-major transposes. cuBLAS cannot see the alignment of
// pointers that live on the device, so a group whose operands are not all 16-byte aligned
// (a view at an odd offset) runs as one cuBLASLt GEMM per group instead.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <mutex>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/gemm.h"
#include "cuda/runtime.h"

namespace triad::cuda {

namespace {

// out = product + bias on every row of n: an f32 bias beside a 16-bit product, which the
// epilogue does not take, added to the unrounded f32 product.
__global__ void add_row_vector_kernel(const float* product, Floats bias, Floats out, int64_t total, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x)
    out.store(t, product[t] + bias.load(t % n));
}

constexpr int kPointerGroups = 128;  // 3 KiB of pointers: under the 4 KiB of kernel arguments

struct GroupPointers {
  const void* a[kPointerGroups];
  const void* b[kPointerGroups];
  void* out[kPointerGroups];
};

// table (3, count): the pointers of a, b and out, one row each.
__global__ void write_group_pointers_kernel(GroupPointers p, int count, const void** table) {
  const int g = int(threadIdx.x);
  if (g >= count) return;
  table[g] = p.a[g];
  table[kPointerGroups + g] = p.b[g];
  table[2 * kPointerGroups + g] = p.out[g];
}

std::mutex g_blas_mutex;  // a handle's stream is per call: set and used under the lock
std::array<cublasHandle_t, kMaxDevices> g_blas{};

cublasHandle_t blas_handle(int device) {
  check_device_index(device);
  if (!g_blas[device]) TRIAD_CUBLAS_CHECK(cublasCreate(&g_blas[device]));
  return g_blas[device];
}

cudaDataType_t blas_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : t == DType::f16 ? CUDA_R_16F : CUDA_R_32F; }

}  // namespace

void CudaBackend::grouped_matmul(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                                 const std::vector<Tensor>& out, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                 int64_t k, bool accumulate) {
  if (a.empty() || m == 0 || n == 0) return;
  require_floating(a[0], "grouped_matmul");
  TRIAD_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX,
              "grouped_matmul: M " << m << ", N " << n << ", K " << k << " exceed cuBLAS's int range");
  bool aligned = true;
  for (size_t g = 0; g < a.size(); ++g)
    for (const Tensor* t : {&a[g], &b[g], &out[g]})
      aligned = aligned && reinterpret_cast<uintptr_t>(t->raw_data()) % 16 == 0;
  if (!aligned) {
    GemmOptions o;
    o.beta = accumulate ? 1.0 : 0.0;
    for (size_t g = 0; g < a.size(); ++g) gemm(a[g], b[g], out[g], trans_a, trans_b, 1, m, n, k, o);
    return;
  }
  OnDevice on(a[0]);
  const cudaDataType_t ab_type = blas_type(a[0].dtype()), out_type = blas_type(out[0].dtype());
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // out^T (N, M) = op(b)^T op(a)^T in column-major terms (Note [cuBLASLt GEMM]).
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_b = int(trans_b ? k : n), ld_a = int(trans_a ? m : k), ld_out = int(n);
  for (size_t first = 0; first < a.size(); first += kPointerGroups) {
    const int count = int(std::min<size_t>(kPointerGroups, a.size() - first));
    GroupPointers p{};
    for (int g = 0; g < count; ++g) {
      p.a[g] = a[first + g].raw_data();
      p.b[g] = b[first + g].raw_data();
      p.out[g] = out[first + g].raw_data();
    }
    const Tensor table = Tensor::empty({3 * kPointerGroups}, DType::i64, a[0].device());
    const auto** pointers = static_cast<const void**>(table.raw_data());
    write_group_pointers_kernel<<<1, kPointerGroups, 0, on.stream()>>>(p, count, pointers);
    TRIAD_CUDA_CHECK_LAUNCH();
    std::lock_guard<std::mutex> lock(g_blas_mutex);
    const cublasHandle_t h = blas_handle(a[0].device().index);
    TRIAD_CUBLAS_CHECK(cublasSetStream(h, on.stream()));
    TRIAD_CUBLAS_CHECK(cublasGemmBatchedEx(h, op_b, op_a, int(n), int(m), int(k), &alpha, pointers + kPointerGroups,
                                           ab_type, ld_b, pointers, ab_type, ld_a, &beta,
                                           const_cast<void**>(pointers + 2 * kPointerGroups), out_type, ld_out, count,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, int64_t batch,
                         int64_t m, int64_t n, int64_t k, bool accumulate) {
  require_floating(a, "matmul");
  GemmOptions o;
  o.beta = accumulate ? 1.0 : 0.0;
  gemm(a, b, out, trans_a, trans_b, batch, m, n, k, o);
}

void CudaBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  require_floating(x, "linear");
  GemmOptions o;
  if (bias.defined()) o.epilogue = Epilogue::bias, o.bias = bias;
  const Tensor product = linear_product(x, weight, out, o, !bias.defined() || bias.dtype() == out.dtype());
  const int64_t total = out.numel(), n = weight.size(0);
  if (!product.defined() || total == 0) return;
  OnDevice on(out);
  add_row_vector_kernel<<<blocks_for(total), kThreads, 0, on.stream()>>>(
      ptr<const float>(product), floats(bias, "linear"), floats(out, "linear"), total, n);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
