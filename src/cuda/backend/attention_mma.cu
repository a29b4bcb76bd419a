// Fused causal attention on tensor cores, for bf16 and f16 (CudaBackend::attention and
// attention_backward choose these kernels where they fit; tensor/cpu/attention.cpp is the
// reference). Same passes, tiles and formulas as the FMA kernels of attention.cu, whose
// header describes the algorithm; here every tile product is a warp-level matrix
// multiply-accumulate (WMMA: 16x16x16, 16-bit inputs, f32 accumulators).
//
// Note [Tensor-core attention]:
// - A block has 4 warps and works on 64-row tiles. In every product a warp owns 16 rows
//   of the result: query rows for S, dP and dQ, key rows for dK and dV (forward: the
//   block's query tile; backward: the block's key tile, and the current query tile).
// - q, k, v and dO tiles are copied into shared memory as stored (16 bytes a load where
//   rows allow), zeros past the head size and past the last row: padding multiplies as 0.
// - S and dP leave the accumulators for f32 shared tiles, where the softmax runs a row
//   at a time, two lanes per row, 32 columns each (visited in an order staggered by lane,
//   so the warp's 32 lanes read 32 banks). P and dS are rounded to the input dtype there,
//   as the next products' inputs; the row sums l add the unrounded f32 P. So out, dq and
//   dk carry one more rounding than the FMA kernels' (of P, of dS), as in
//   flash-attention.
// - Accumulators that outlive a tile (the forward's O, the backward's dK and dV) live in
//   f32 shared tiles: a product loads the warp's fragments from there, adds, and stores
//   them back, and the softmax rescales O's rows there. dQ of a query tile goes through a
//   shared tile that reuses S and dP's space, then into the f32 buffer with atomics, as in
//   attention.cu.
// - Shared rows are padded by 32 bytes: WMMA wants 32-byte-aligned fragment pointers, and
//   the padding moves successive rows to other banks. Head size 64 (GPT-2): 76 KiB
//   forward, 133 KiB backward; head size 128: 116 and 197 KiB (the backward then fits a
//   Hopper GPU, not an A100, where attention.cu's kernels run it).
//
// Needs compute capability 8.0 (bf16 WMMA); the build targets 8.0 and 9.0. The kernels
// live in attention_mma_kernels.cuh, where a CPU test runs them under an emulation of
// CUDA (tests/cuda/test_attention_mma_emulated.cpp).
#include <mma.h>

#include <cstdint>

#include "cuda/backend/attention_mma_kernels.cuh"
#include "cuda/backend/cuda_backend.h"

namespace triad::cuda {

namespace {

// ---- launching ----

template <class E, int HS>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double scale,
             const Tensor& key_start, const Tensor& cached, cudaStream_t stream) {
  auto* kernel = mma_attention_kernel<E, HS>;
  constexpr size_t bytes = Layout<HS>::forward;
  allow_shared_memory(kernel, bytes, q.device().index, q.size(3));
  const dim3 grid(unsigned(q.size(0) * q.size(1)), tiles(q.size(2)));
  kernel<<<grid, kMmaThreads, bytes, stream>>>(Operand(q), Operand(k), Operand(v), ptr<uint16_t>(out),
                                                ptr<float>(lse), geometry(q, k, scale, key_start, cached),
                                                whole_rows<HS>({&q, &k, &v}));
  TRIAD_CUDA_CHECK_LAUNCH();
}

template <class E, int HS>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Tensor& grad_out, const Tensor& dq32, const Tensor& dk, const Tensor& dv, double scale,
              const Tensor& key_start, cudaStream_t stream) {
  const Geometry g = geometry(q, k, scale, key_start);
  const Tensor dsum = attention_dsum<E>(out, grad_out, g, stream);
  auto* kernel = mma_attention_backward_kernel<E, HS>;
  constexpr size_t bytes = Layout<HS>::backward;
  allow_shared_memory(kernel, bytes, q.device().index, q.size(3));
  const dim3 grid(unsigned(q.size(0) * q.size(1)), tiles(k.size(2)));
  kernel<<<grid, kMmaThreads, bytes, stream>>>(Operand(q), Operand(k), Operand(v), Operand(grad_out),
                                                ptr<const float>(lse), ptr<const float>(dsum), ptr<float>(dq32),
                                                ptr<uint16_t>(dk), ptr<uint16_t>(dv), float(scale), g,
                                                whole_rows<HS>({&q, &k, &v, &grad_out}));
  TRIAD_CUDA_CHECK_LAUNCH();
}

// f(E, HS) for q's 16-bit dtype and the smallest instantiated head size that holds its hs.
template <class F>
void with_kernel(const Tensor& q, F&& f) {
  const int64_t hs = q.size(3);
  auto by_size = [&]<class E>() {
    if (hs <= 32)
      f.template operator()<E, 32>();
    else if (hs <= 64)
      f.template operator()<E, 64>();
    else
      f.template operator()<E, 128>();
  };
  if (q.dtype() == DType::bf16)
    by_size.template operator()<BF16>();
  else
    by_size.template operator()<F16>();
}

template <int HS>
size_t shared_bytes(bool backward) {
  return backward ? Layout<HS>::backward : Layout<HS>::forward;
}

}  // namespace

bool mma_attention_fits(const Tensor& q, bool backward) {
  if (q.dtype() != DType::bf16 && q.dtype() != DType::f16) return false;
  const int64_t hs = q.size(3);
  if (hs > 128) return false;
  const size_t bytes = hs <= 32 ? shared_bytes<32>(backward) : hs <= 64 ? shared_bytes<64>(backward)
                                                                        : shared_bytes<128>(backward);
  return bytes <= optin_shared_memory(q.device().index);
}

void mma_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   double scale, const Tensor& key_start, const Tensor& cached, cudaStream_t stream) {
  with_kernel(q, [&]<class E, int HS>() { forward<E, HS>(q, k, v, out, lse, scale, key_start, cached, stream); });
}

void mma_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            const Tensor& grad_out, const Tensor& dq32, const Tensor& dk, const Tensor& dv,
                            double scale, const Tensor& key_start, cudaStream_t stream) {
  with_kernel(q, [&]<class E, int HS>() {
    backward<E, HS>(q, k, v, out, lse, grad_out, dq32, dk, dv, scale, key_start, stream);
  });
}

}  // namespace triad::cuda
