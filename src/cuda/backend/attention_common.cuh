// What the two sets of fused causal attention kernels share (attention.cu: CUDA-core FMAs,
// every dtype; attention_mma.cu: tensor cores, bf16 and f16): the tile size, operands and
// geometry, element loads and stores, the backward's D = rowsum(dO o O) kernel and the
// launch helpers. Included by those two files, and by the CPU test that emulates the
// tensor-core kernels (tests/cuda/test_attention_mma_emulated.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/backend/convert.cuh"
#include "cuda/backend/launch.cuh"

namespace triad::cuda {

constexpr int kTile = 64;  // query or key rows of a tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Loads and stores of an element in its stored dtype, as f32.
struct F32 {
  using type = float;
  static __device__ float load(const float* p, int64_t i) { return p[i]; }
  static __device__ void store(float* p, int64_t i, float x) { p[i] = x; }
};
struct BF16 {
  using type = uint16_t;
  static __device__ float load(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
  static __device__ void store(uint16_t* p, int64_t i, float x) { p[i] = float_to_bf16(x); }
};
struct F16 {
  using type = uint16_t;
  static __device__ float load(const uint16_t* p, int64_t i) { return f16_to_float(p[i]); }
  static __device__ void store(uint16_t* p, int64_t i, float x) { p[i] = float_to_f16(x); }
};

// A (B, NH, T, hs) operand whose hs dimension has stride 1; strides in elements.
struct Operand {
  const void* data;
  int64_t stride_b, stride_h, stride_t;
  explicit Operand(const Tensor& t)
      : data(t.raw_data()), stride_b(t.stride(0)), stride_h(t.stride(1)), stride_t(t.stride(2)) {}
  // The first element of head bh (= b NH + h).
  template <class T>
  __device__ const T* head(int64_t bh, int heads) const {
    return static_cast<const T*>(data) + (bh / heads) * stride_b + (bh % heads) * stride_h;
  }
};

// A (B, NH, T, hs) tensor the kernels write, hs of stride 1, any other strides (an output
// in the (B, T, NH, hs) layout, a head view of a fused gradient); strides in elements.
struct Destination {
  void* data;
  int64_t stride_b, stride_h, stride_t;
  explicit Destination(const Tensor& t)
      : data(t.raw_data()), stride_b(t.stride(0)), stride_h(t.stride(1)), stride_t(t.stride(2)) {}
  // Row t of head bh (= b NH + h).
  template <class T>
  __device__ T* row(int64_t bh, int heads, int64_t t) const {
    return static_cast<T*>(data) + (bh / heads) * stride_b + (bh % heads) * stride_h + t * stride_t;
  }
};

struct Geometry {
  int heads;         // NH
  int hs;            // head size, <= the kernel's HS
  int64_t tq, tk;    // queries and keys per head; query i sees keys j <= i + tk - tq
  float scale_log2;  // scale log2 e: scores in base 2
  // (B,) on the device, or nullptr: row b's queries also see only keys j >= key_start[b]
  // (ops::causal_attention); a query that sees none outputs 0 with lse +inf.
  const int64_t* key_start = nullptr;
  // (1,) on the device, or nullptr: only the first cached[0] + tq of the tk keys count
  // (ops::causal_attention's cached; forward only).
  const int64_t* cached = nullptr;
  // Query heads per key/value head (grouped-query attention): query head h of row b reads
  // key/value head h / group of NH / group. The backward's blocks each own a key/value head
  // and take its group's query heads in turn.
  int group = 1;
  __host__ __device__ int kv_heads() const { return heads / group; }
  // The key/value head that query head bh (= b NH + h) reads, as b NKV + h / group.
  __host__ __device__ int64_t kv_head(int64_t bh) const { return bh / heads * kv_heads() + bh % heads / group; }
  // Query head r (< group) of those that read key/value head bkv (= b NKV + j): b NH + j group + r.
  __host__ __device__ int64_t query_head(int64_t bkv, int r) const {
    return bkv / kv_heads() * heads + bkv % kv_heads() * group + r;
  }
  // The first key that head bh's queries see.
  __host__ __device__ int64_t first_key(int64_t bh) const { return key_start ? key_start[bh / heads] : 0; }
  // The keys that count: query i sees keys j <= i + keys() - tq (never past tk).
  __host__ __device__ int64_t keys() const {
    if (!cached) return tk;
    const int64_t n = *cached + tq;
    return n < tk ? n : tk;
  }
};

// dsum[r] = sum over hs of dO o O for row r of (B NH Tq); a warp per row.
template <class E>
__global__ void attention_dot_kernel(Operand out, Operand grad, float* dsum, Geometry g, int64_t rows) {
  using T = typename E::type;
  const int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const int64_t bh = r / g.tq, i = r % g.tq;
  const T* o = out.head<T>(bh, g.heads) + i * out.stride_t;
  const T* dy = grad.head<T>(bh, g.heads) + i * grad.stride_t;
  float s = 0.0f;
  for (int d = lane; d < g.hs; d += 32) s += E::load(o, d) * E::load(dy, d);
  s = warp_reduce(s, SumOp{});
  if (lane == 0) dsum[r] = s;
}

// The dynamic shared memory a block may opt in to on `device`.
inline size_t optin_shared_memory(int device) {
  int available = 0;
  TRIAD_CUDA_CHECK(cudaDeviceGetAttribute(&available, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return size_t(available);
}

// Lets `kernel` use `bytes` of dynamic shared memory on `device`, or throws.
template <class Kernel>
void allow_shared_memory(Kernel* kernel, size_t bytes, int device, int64_t hs) {
  const size_t available = optin_shared_memory(device);
  TRIAD_CHECK(bytes <= available, "cuda backend: attention at head size "
                                              << hs << " needs " << bytes
                                              << " bytes of shared memory per block; device " << device << " offers "
                                              << available);
  TRIAD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

inline Geometry geometry(const Tensor& q, const Tensor& k, double scale, const Tensor& key_start = Tensor(),
                         const Tensor& cached = Tensor()) {
  return Geometry{int(q.size(1)),
                  int(q.size(3)),
                  q.size(2),
                  k.size(2),
                  float(scale * 1.4426950408889634),
                  key_start.defined() ? static_cast<const int64_t*>(key_start.raw_data()) : nullptr,
                  cached.defined() ? static_cast<const int64_t*>(cached.raw_data()) : nullptr,
                  int(q.size(1) / k.size(1))};
}

// Grid dimension y counts tiles of one head (of `tile` rows).
inline unsigned tiles(int64_t rows, int tile = kTile) {
  const int64_t n = (rows + tile - 1) / tile;
  TRIAD_CHECK(n <= 65535, "cuda backend: attention over " << rows << " positions exceeds " << 65535 * tile);
  return unsigned(n);
}

#ifdef __CUDACC__  // kernel launches parse only under nvcc (the emulated test includes this)
// D = rowsum(dO o O) of the backward, (B NH Tq) floats, for out of q's geometry g.
template <class E>
Tensor attention_dsum(const Tensor& out, const Tensor& grad_out, const Geometry& g, cudaStream_t stream) {
  const int64_t rows = out.numel() / g.hs;
  const Tensor dsum = Tensor::empty({rows}, DType::f32, out.device());
  constexpr int kRowsPerBlock = kThreads / 32;
  attention_dot_kernel<E><<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0, stream>>>(
      Operand(out), Operand(grad_out), ptr<float>(dsum), g, rows);
  TRIAD_CUDA_CHECK_LAUNCH();
  return dsum;
}
#endif

// ---- the tensor-core kernels (attention_mma.cu) ----

// Whether the tensor-core kernels take q's dtype (bf16, f16) at its head size on its
// device: head sizes up to 128, and the pass's shared memory within what a block may opt
// in to (the backward at head size 128 needs about 197 KiB: Hopper, not Ampere).
bool mma_attention_fits(const Tensor& q, bool backward);
// The passes of CudaBackend::attention and attention_backward on tensor cores; dq32 is
// f32 of dq's shape (any strides, stride 1 along hs), zeroed, that dQ is summed into.
void mma_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   double scale, const Tensor& key_start, const Tensor& cached, cudaStream_t stream);
void mma_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            const Tensor& grad_out, const Tensor& dq32, const Tensor& dk, const Tensor& dv,
                            double scale, const Tensor& key_start, cudaStream_t stream);

}  // namespace triad::cuda
