// GEMM through cuBLASLt (cuda/gemm.h), and ops::linear's product with its bias in
// cuBLASLt's bias epilogue (tensor/cpu/matmul.cpp on the GPU). matmul takes f32, bf16 or f16 operands and a result
// of their dtype (16-bit products accumulate in f32 on tensor cores and round once: Note
// [16-bit activations] in autograd/functions.cpp).
//
// Note [Grouped GEMM on the GPU]: ops::grouped_matmul's groups (an MoE layer's experts)
// are products whose operands lie anywhere (each expert's weight is a parameter of its
// own). Products of one shape (experts on `capacity` slots each) run in one call of
// cuBLAS's pointer-array batched GEMM (cublasGemmBatchedEx); products of their own shapes
// (a dropless layer's experts, each on the rows it received) in one call of its grouped
// GEMM (cublasGemmGroupedBatchedEx, CUDA 12.5 on: one group per product, the shapes in
// host arrays), or one GEMM per product where cuBLAS does not take the types. Empty
// products are left out, and those over an inner dimension of 0 are filled with zeros.
// The arrays of device pointers are written on the device by a kernel
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
#include <vector>

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
                                 const std::vector<Tensor>& out, bool trans_a, bool trans_b,
                                 const std::vector<GemmDims>& dims, bool accumulate) {
  if (a.empty()) return;
  require_floating(a[0], "grouped_matmul");
  std::vector<size_t> live;  // every group (ops::grouped_matmul_ passes only products to make)
  bool aligned = true, uniform = true;
  for (size_t g = 0; g < a.size(); ++g) {
    const auto [m, n, k] = dims[g];
    TRIAD_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX,
                "grouped_matmul: M " << m << ", N " << n << ", K " << k << " exceed cuBLAS's int range");
    for (const Tensor* t : {&a[g], &b[g], &out[g]})
      aligned = aligned && reinterpret_cast<uintptr_t>(t->raw_data()) % 16 == 0;
    uniform = uniform && (live.empty() || dims[g] == dims[live[0]]);
    live.push_back(g);
  }
  if (live.empty()) return;
  const auto one_by_one = [&](size_t first, size_t count) {
    GemmOptions o;
    o.beta = accumulate ? 1.0 : 0.0;
    for (size_t i = first; i < first + count; ++i) {
      const size_t g = live[i];
      gemm(a[g], b[g], out[g], trans_a, trans_b, 1, dims[g].m, dims[g].n, dims[g].k, o);
    }
  };
  if (!aligned) return one_by_one(0, live.size());
  OnDevice on(a[0]);
  const cudaDataType_t ab_type = blas_type(a[0].dtype()), out_type = blas_type(out[0].dtype());
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // out^T (N, M) = op(b)^T op(a)^T in column-major terms (Note [cuBLASLt GEMM]).
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  for (size_t first = 0; first < live.size(); first += kPointerGroups) {
    const int count = int(std::min<size_t>(kPointerGroups, live.size() - first));
    GroupPointers p{};
    for (int i = 0; i < count; ++i) {
      const size_t g = live[first + size_t(i)];
      p.a[i] = a[g].raw_data();
      p.b[i] = b[g].raw_data();
      p.out[i] = out[g].raw_data();
    }
    const Tensor table = Tensor::empty({3 * kPointerGroups}, DType::i64, a[0].device());
    const auto** pointers = static_cast<const void**>(table.raw_data());
    write_group_pointers_kernel<<<1, kPointerGroups, 0, on.stream()>>>(p, count, pointers);
    TRIAD_CUDA_CHECK_LAUNCH();
    std::unique_lock<std::mutex> lock(g_blas_mutex);
    const cublasHandle_t h = blas_handle(a[0].device().index);
    TRIAD_CUBLAS_CHECK(cublasSetStream(h, on.stream()));
    if (uniform) {
      const auto [m, n, k] = dims[live[0]];
      TRIAD_CUBLAS_CHECK(cublasGemmBatchedEx(h, op_b, op_a, int(n), int(m), int(k), &alpha, pointers + kPointerGroups,
                                             ab_type, int(trans_b ? k : n), pointers, ab_type, int(trans_a ? m : k),
                                             &beta, const_cast<void**>(pointers + 2 * kPointerGroups), out_type, int(n),
                                             count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      continue;
    }
    // One problem per group, each of its own shape (host arrays, as cuBLAS takes them).
    std::vector<cublasOperation_t> ops_a(size_t(count), op_b), ops_b(size_t(count), op_a);
    std::vector<int> ms, ns, ks, ld_as, ld_bs, ld_outs, sizes(size_t(count), 1);
    std::vector<float> alphas(size_t(count), alpha), betas(size_t(count), beta);
    for (int i = 0; i < count; ++i) {
      const auto [m, n, k] = dims[live[first + size_t(i)]];
      ms.push_back(int(n)), ns.push_back(int(m)), ks.push_back(int(k));
      ld_as.push_back(int(trans_b ? k : n)), ld_bs.push_back(int(trans_a ? m : k)), ld_outs.push_back(int(n));
    }
    const cublasStatus_t status =
        cublasGemmGroupedBatchedEx(h, ops_a.data(), ops_b.data(), ms.data(), ns.data(), ks.data(), alphas.data(),
                                   pointers + kPointerGroups, ab_type, ld_as.data(), pointers, ab_type, ld_bs.data(),
                                   betas.data(), const_cast<void* const*>(pointers + 2 * kPointerGroups), out_type,
                                   ld_outs.data(), count, sizes.data(), CUBLAS_COMPUTE_32F);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) {  // a combination of types the grouped GEMM lacks
      lock.unlock();
      one_by_one(first, size_t(count));
      continue;
    }
    TRIAD_CUBLAS_CHECK(status);
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
