// Fused causal attention on tensor cores, for bf16 and f16 (CudaBackend::attention and
// attention_backward choose these kernels where they fit; tensor/cpu/attention.cpp is the
// reference). Same passes and formulas as the FMA kernels of attention.cu, whose header
// describes the algorithm; here every tile product is a warp-level mma.sync (m16n8k16,
// 16-bit inputs, f32 accumulators), as in FlashAttention-2.
//
// Note [Tensor-core attention]:
// - A block has 4 warps and works on 64-row tiles of keys (forward) or queries (backward).
//   In the forward a warp owns 32 query rows up to head size 64 (two 16-row blocks that
//   share every key and value fragment read from shared memory, a 128-query block), 16
//   above (registers): S = Q K^T, O += P V. In the backward a warp owns 16 key rows (S^T =
//   K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q), then 16 query rows for dQ = dS K.
// - Tiles are copied into shared memory as stored, by cp.async where rows allow (16 bytes
//   a copy), zeros past the head size and past the last row: padding multiplies as 0. The
//   next key tile (forward) or query tile (backward) is copied while the current one is
//   used. Rows are padded by 16 bytes so that ldmatrix's 8 row reads hit 8 bank groups.
// - A backward block owns a key tile of one key/value head; under grouped-query attention
//   the query tiles of every query head of its group stream through it, head after head,
//   so dK and dV sum over the group in registers.
// - Everything a warp accumulates stays in registers: scores, P, O and the softmax's max
//   and sum (forward); S^T, dP^T, dK and dV (backward). The scores' C fragments become the
//   next product's A fragments in registers (rounded to the input dtype), so P (forward)
//   and P^T, dS^T (backward) never pass through memory. The softmax's row max and sum
//   combine over the 4 lanes (a quad) that hold a row. The row sums l add the unrounded
//   f32 P, so out, dq and dk carry one more rounding than the FMA kernels' (of P, of dS),
//   as in flash-attention.
// - dQ needs dS with query rows: the backward writes dS^T (16-bit) into shared memory, and
//   each warp reads its 16 query rows back transposed (ldmatrix .trans), multiplies by K
//   and adds the result into the f32 dq buffer with atomics, as attention.cu does.
// - Key tiles that hold no masked key (past a row's causal limit, before key_start, past
//   the last key) skip the mask.
// - Shared memory at head size 64 (GPT-2): 54 KiB forward, 64 KiB backward; head size 128:
//   85 and 112 KiB. Registers (ptxas, sm_90) at head size 64: 251 forward, 216 backward.
//
// Needs compute capability 8.0 (bf16 mma.sync, cp.async); the build targets 8.0 and 9.0.
// The kernels live in attention_mma_kernels.cuh, where a CPU test runs them under an
// emulation of CUDA (tests/cuda/test_attention_mma_emulated.cpp).
#include "cuda/backend/mma_sync.cuh"
// The instructions come first: the kernels' header takes them from there.
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
  const dim3 grid(unsigned(q.size(0) * q.size(1)), tiles(q.size(2), Layout<HS>::kQueryRows));
  kernel<<<grid, kMmaThreads, bytes, stream>>>(Operand(q), Operand(k), Operand(v), Destination(out), ptr<float>(lse),
                                               geometry(q, k, scale, key_start, cached), whole_rows<HS>({&q, &k, &v}));
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
  const dim3 grid(unsigned(k.size(0) * k.size(1)), tiles(k.size(2)));  // a block per key/value head and key tile
  kernel<<<grid, kMmaThreads, bytes, stream>>>(
      Operand(q), Operand(k), Operand(v), Operand(grad_out), ptr<const float>(lse), ptr<const float>(dsum),
      Destination(dq32), Destination(dk), Destination(dv), float(scale), g, whole_rows<HS>({&q, &k, &v, &grad_out}));
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
