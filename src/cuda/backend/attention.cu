// Fused causal attention on the GPU (Backend::attention and attention_backward;
// tensor/cpu/attention.cpp is the reference), flash-attention-2 style. Scores exist only
// tile by tile in registers and shared memory; q, k, v and grad_out are read in their
// stored dtype (f32, bf16, f16) and everything is computed in f32 with CUDA-core FMAs, one
// code path for the three dtypes. These kernels serve f32 (tensor cores would give its
// products TF32 precision), and bf16/f16 where the tensor-core kernels of
// attention_mma.cu do not fit (head size 128 backward on a device with less than about
// 197 KiB of shared memory per block, as the A100). CudaBackend::attention and
// attention_backward below choose.
//
// Tiles are kTile = 64 rows; a block has 256 threads, thread t in row group g = t / 16 and
// column c = t % 16. In every tile product a thread owns rows 4g .. 4g+3 and, of the other
// dimension, c, c+16, c+32, ...: the 16 threads of a row group are one half-warp, so row
// maxima and sums meet in shuffles. Shared-memory rows are padded by one float, so where
// those 16 threads read 16 different rows at one column they hit 16 banks.
//
// Forward: one block per (batch x head, query tile), the last (heaviest) query tiles
// launched first. The query tile stays in shared memory while key and value tiles stream
// through it. Online softmax per row in base 2 (scores times scale log2 e, exp2f): the
// output accumulators are rescaled when the running max grows. Every row sees key 0, so
// the max is finite after the first tile and no -inf - -inf arises. out in the input dtype,
// lse (natural log) in f32. With ops::causal_attention's cached the kernel reads how many
// keys count from device memory (Geometry::keys()): a decode step over a whole cache runs one
// launch whatever the cache's length (Note [Positions on the device] in tensor/ops.h).
//
// Backward: D = rowsum(dO o O) first (a warp per row). Then one block per (batch x
// key/value head, key tile) keeps its K and V tiles in shared memory and its dK, dV in
// registers while the query tiles that see them stream through, those of every query head
// of the head's group in turn (grouped-query attention: dK and dV sum over the group without
// a copy of k and v per query head): S = Q K^T again, P = exp(S - lse),
// dV += P^T dO, dP = dO V^T, dS = P o (dP - D), dK += scale dS^T Q, and dQ += scale dS K.
// dQ sums over key tiles that other blocks own, so it is added with f32 atomics into an
// f32 buffer (dq itself for f32; converted afterwards for 16-bit). A second pass per query
// tile would avoid the atomics but recompute S and dP (7 tile products per tile pair
// instead of 5); the price of atomics is that dq's last bits depend on the order the
// blocks run in (dk, dv and out do not), as with embedding_backward.
//
// Head sizes up to 128: kernels are instantiated for 32, 64 and 128, a head padded with
// zeros to the next. Shared memory per block (dynamic, opted in above 48 KiB): forward
// 3 tiles + P, backward 4 tiles + P/dS: 113 and 146 KiB at head size 128.
//
// The kernels live in attention_fma_kernels.cuh, where a CPU test runs them under an
// emulation of CUDA (tests/cuda/test_attention_fma_emulated.cpp); this file launches them.
#include "cuda/backend/attention_fma_kernels.cuh"
#include "cuda/backend/cuda_backend.h"

namespace triad::cuda {

namespace {

template <class E, int HS>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double scale,
             const Tensor& key_start, const Tensor& cached, cudaStream_t stream) {
  auto* kernel = attention_kernel<E, HS>;
  allow_shared_memory(kernel, forward_smem<HS>(), q.device().index, q.size(3));
  const dim3 grid(unsigned(q.size(0) * q.size(1)), tiles(q.size(2)));
  kernel<<<grid, kAttnThreads, forward_smem<HS>(), stream>>>(Operand(q), Operand(k), Operand(v), Destination(out),
                                                             ptr<float>(lse), geometry(q, k, scale, key_start, cached));
  TRIAD_CUDA_CHECK_LAUNCH();
}

template <class E, int HS>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Tensor& grad_out, const Tensor& dq32, const Tensor& dk, const Tensor& dv, double scale,
              const Tensor& key_start, cudaStream_t stream) {
  const Geometry g = geometry(q, k, scale, key_start);
  const Tensor dsum = attention_dsum<E>(out, grad_out, g, stream);
  auto* kernel = attention_backward_kernel<E, HS>;
  allow_shared_memory(kernel, backward_smem<HS>(), q.device().index, q.size(3));
  const dim3 grid(unsigned(k.size(0) * k.size(1)), tiles(k.size(2)));  // a block per key/value head and key tile
  kernel<<<grid, kAttnThreads, backward_smem<HS>(), stream>>>(
      Operand(q), Operand(k), Operand(v), Operand(grad_out), ptr<const float>(lse), ptr<const float>(dsum),
      Destination(dq32), Destination(dk), Destination(dv), float(scale), g);
  TRIAD_CUDA_CHECK_LAUNCH();
}

// The kernel of q's dtype and the smallest instantiated head size that holds hs.
struct Forward {
  template <class E, int HS>
  static void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double scale,
                  const Tensor& key_start, const Tensor& cached, cudaStream_t stream) {
    forward<E, HS>(q, k, v, out, lse, scale, key_start, cached, stream);
  }
};
struct Backward {
  template <class E, int HS>
  static void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                  const Tensor& grad_out, const Tensor& dq32, const Tensor& dk, const Tensor& dv, double scale,
                  const Tensor& key_start, cudaStream_t stream) {
    backward<E, HS>(q, k, v, out, lse, grad_out, dq32, dk, dv, scale, key_start, stream);
  }
};

template <class Pass, class E, class... Args>
void with_head_size(int64_t hs, Args&&... args) {
  if (hs <= 32)
    Pass::template run<E, 32>(args...);
  else if (hs <= 64)
    Pass::template run<E, 64>(args...);
  else
    Pass::template run<E, 128>(args...);
}

template <class Pass, class... Args>
void dispatch(const Tensor& q, const char* method, Args&&... args) {
  TRIAD_CHECK(q.size(3) <= 128, "cuda backend: " << method << " takes head sizes up to 128, got " << q.str());
  switch (q.dtype()) {
    case DType::f32:
      return with_head_size<Pass, F32>(q.size(3), args...);
    case DType::bf16:
      return with_head_size<Pass, BF16>(q.size(3), args...);
    case DType::f16:
      return with_head_size<Pass, F16>(q.size(3), args...);
    default:
      TRIAD_CHECK(false, "cuda backend: " << method << " takes f32, bf16 or f16, got " << q.str()
                                          << " (f64 kernels are CPU-only; they serve gradient checks)");
  }
}

}  // namespace

// bf16 and f16 go to the tensor-core kernels where they fit (attention_mma.cu), the rest
// to the FMA kernels here.
void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            double scale, const Tensor& key_start, const Tensor& cached) {
  OnDevice on(q);
  if (mma_attention_fits(q, /*backward=*/false))
    mma_attention(q, k, v, out, lse, scale, key_start, cached, on.stream());
  else
    dispatch<Forward>(q, "attention", q, k, v, out, lse, scale, key_start, cached, on.stream());
}

void CudaBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, const Tensor& grad_out, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv, double scale, const Tensor& key_start) {
  OnDevice on(q);
  // dQ is summed with atomics in f32: into dq itself when it is f32.
  const Tensor dq32 = dq.dtype() == DType::f32 ? dq : Tensor::empty(dq.shape(), DType::f32, dq.device());
  if (dq32.is_contiguous())
    TRIAD_CUDA_CHECK(cudaMemsetAsync(dq32.raw_data(), 0, dq32.nbytes(), on.stream()));
  else
    fill(dq32, 0.0);
  if (mma_attention_fits(q, /*backward=*/true))
    mma_attention_backward(q, k, v, out, lse, grad_out, dq32, dk, dv, scale, key_start, on.stream());
  else
    dispatch<Backward>(q, "attention_backward", q, k, v, out, lse, grad_out, dq32, dk, dv, scale, key_start,
                       on.stream());
  if (!dq32.is_same(dq)) copy(dq, dq32);
}

}  // namespace triad::cuda
