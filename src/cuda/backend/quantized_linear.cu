// The quantized linear layers' GEMMs on the GPU (ops::quantized_linear): the integer GEMM
// of 8-bit tokens (int8_linear_kernel: Note [Integer GEMM on the GPU]; on tensor cores,
// int8_mma_linear_kernel: Note [Integer GEMM on tensor cores]) and the widened f32
// GEMM of 16-bit ones, both reading ops::pack_weight's layout as it is; and the lookup of a
// packed weight's rows (ops::packed_rows, a quantized token table's). The kernels are in
// quantized_linear_kernels.cuh.
#include "cuda/backend/mma_sync.cuh"
// The instructions come first: the kernels' header takes them from there.
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/backend/quantized_linear_kernels.cuh"
#include "cuda/deferred_errors.h"
#include "tensor/quantized_matmul.h"

namespace triad::cuda {

namespace {

constexpr int64_t kMaxGridY = 65535;  // token blocks of a grid; the kernels loop past it

unsigned token_blocks(int64_t m, int64_t per_block) {
  return unsigned(std::min((m + per_block - 1) / per_block, kMaxGridY));
}

template <int R>
void launch_int8(const QuantizedLinearArgs& p, bool four_bits, bool offsets, cudaStream_t stream) {
  const dim3 grid(unsigned((p.n + 31) / 32 * 32 / kQlTileCols), token_blocks(p.m, R));  // PackedWeight::padded_n
  if (four_bits && offsets)
    int8_linear_kernel<R, true, true><<<grid, kQlThreads, 0, stream>>>(p);
  else if (four_bits)
    int8_linear_kernel<R, true, false><<<grid, kQlThreads, 0, stream>>>(p);
  else if (offsets)
    int8_linear_kernel<R, false, true><<<grid, kQlThreads, 0, stream>>>(p);
  else
    int8_linear_kernel<R, false, false><<<grid, kQlThreads, 0, stream>>>(p);
  TRIAD_CUDA_CHECK_LAUNCH();
}

template <bool FourBits, bool Offsets>
void launch_int8_mma(const QuantizedLinearArgs& p, cudaStream_t stream) {
  const dim3 grid(unsigned((p.n + 31) / 32 * 32 / kQmCols), token_blocks(p.m, kQmTokens));
  int8_mma_linear_kernel<FourBits, Offsets><<<grid, kQmThreads, 0, stream>>>(p);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaBackend::quantized_linear(const Tensor& a, const Tensor& a_scales, const PackedWeight& w, const Tensor& bias,
                                   const Tensor& y, int abits, Int8Kernel) {
  OnDevice on(y);
  QuantizedLinearArgs p;
  p.w = ptr<const int8_t>(w.data);
  p.scales = ptr<const float>(w.scales);
  p.offsets = w.offsets.defined() ? ptr<const float>(w.offsets) : nullptr;
  p.bias = bias.defined() ? ptr<const float>(bias) : nullptr;
  p.y = ptr<float>(y);
  p.m = y.size(0);
  p.n = w.n;
  p.k = w.k;
  p.group = w.format.block;
  p.parts = ql_parts(w.k / w.format.block, w.format.block);
  const bool four_bits = w.format.bits == 4, offsets = p.offsets != nullptr;
  if (abits == 16) {
    p.x = ptr<const float>(a);
    const dim3 grid(unsigned(w.padded_n() / kQlTileCols), token_blocks(p.m, kQlSlots));
    if (four_bits && offsets)
      widened_linear_kernel<true, true><<<grid, kQlThreads, 0, on.stream()>>>(p);
    else if (four_bits)
      widened_linear_kernel<true, false><<<grid, kQlThreads, 0, on.stream()>>>(p);
    else if (offsets)
      widened_linear_kernel<false, true><<<grid, kQlThreads, 0, on.stream()>>>(p);
    else
      widened_linear_kernel<false, false><<<grid, kQlThreads, 0, on.stream()>>>(p);
    TRIAD_CUDA_CHECK_LAUNCH();
    return;
  }
  p.a = ptr<const int8_t>(a);
  p.a_scales = ptr<const float>(a_scales);
  // More than 8 tokens on tensor cores where groups are whole 16-input steps (64 tokens a
  // block); else __dp4a with as few tokens a block as there are, up to 8 (the weight is read
  // once per block).
  if (p.m > 8 && ql_mma_fits(p.group)) {
    if (four_bits && offsets)
      launch_int8_mma<true, true>(p, on.stream());
    else if (four_bits)
      launch_int8_mma<true, false>(p, on.stream());
    else if (offsets)
      launch_int8_mma<false, true>(p, on.stream());
    else
      launch_int8_mma<false, false>(p, on.stream());
  } else if (p.m == 1)
    launch_int8<1>(p, four_bits, offsets, on.stream());
  else if (p.m == 2)
    launch_int8<2>(p, four_bits, offsets, on.stream());
  else if (p.m <= 4)
    launch_int8<4>(p, four_bits, offsets, on.stream());
  else
    launch_int8<8>(p, four_bits, offsets, on.stream());
}

void CudaBackend::packed_rows(const PackedWeight& w, const Tensor& indices, const Tensor& out) {
  OnDevice on(out);
  const int64_t m = indices.numel();
  const BadIndexSink sink = bad_index_sink(out.device().index);
  const unsigned grid = blocks_for(m * w.k);
  if (w.format.bits == 4)
    packed_rows_kernel<true><<<grid, kThreads, 0, on.stream()>>>(ptr<const int8_t>(w.data), ptr<const float>(w.scales),
                                                                 ptr<const int64_t>(indices), ptr<float>(out), m, w.n,
                                                                 w.k, w.format.block, sink);
  else
    packed_rows_kernel<false><<<grid, kThreads, 0, on.stream()>>>(ptr<const int8_t>(w.data), ptr<const float>(w.scales),
                                                                  ptr<const int64_t>(indices), ptr<float>(out), m, w.n,
                                                                  w.k, w.format.block, sink);
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
