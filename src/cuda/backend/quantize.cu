// Block-wise quantization (tensor/cpu/quantize.cpp on the GPU): one thread block per
// quantization block to quantize (a block max, then the values), one thread per output
// element (at 4 bits per byte) to dequantize and sum. The kernels are in
// quantize_kernels.cuh.
#include <type_traits>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/backend/quantize_kernels.cuh"

namespace triad::cuda {

namespace {

// f(load-or-store functor, bits) for a quantizable dtype (f32, bf16, f16; the op layer
// has checked it) and the format's bits as a compile-time constant.
template <class F32, class Bf16, class F16, class F>
void visit_quantized(DType t, int bits, F&& f) {
  auto with_type = [&](auto bits_tag) {
    switch (t) {
      case DType::bf16:
        return f(Bf16{}, bits_tag);
      case DType::f16:
        return f(F16{}, bits_tag);
      default:
        return f(F32{}, bits_tag);
    }
  };
  if (bits == 8)
    with_type(std::integral_constant<int, 8>{});
  else
    with_type(std::integral_constant<int, 4>{});
}

constexpr int64_t kMaxGrid = int64_t(1) << 20;  // blocks of a grid-stride launch, at most

}  // namespace

void CudaBackend::quantize_blocks(const Tensor& src, const Tensor& q, const Tensor& scales, int64_t rows, int64_t n,
                                  const QuantFormat& format) {
  OnDevice on(src);
  const unsigned grid = unsigned(std::min(rows * format.blocks(n), kMaxGrid));
  const int threads = row_threads(format.bits == 8 ? format.block : format.block / 2);
  visit_quantized<LoadF32, LoadBf16, LoadF16>(src.dtype(), format.bits, [&](auto load, auto bits) {
    using Load = decltype(load);
    constexpr int kBits = decltype(bits)::value;
    quantize_kernel<kBits><<<grid, threads, 0, on.stream()>>>(ptr<const typename Load::type>(src), ptr<int8_t>(q),
                                                              ptr<float>(scales),
                                                              QuantGeometry<kBits>{rows, n, format.block}, load);
    TRIAD_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& out, int64_t rows, int64_t k,
                                    int64_t n, const QuantFormat& format) {
  OnDevice on(out);
  const unsigned grid = blocks_for(rows * format.bytes(n));
  visit_quantized<StoreF32, StoreBf16, StoreF16>(out.dtype(), format.bits, [&](auto store, auto bits) {
    using Store = decltype(store);
    constexpr int kBits = decltype(bits)::value;
    dequantize_kernel<kBits><<<grid, kThreads, 0, on.stream()>>>(ptr<const int8_t>(q), ptr<const float>(scales),
                                                                 ptr<typename Store::type>(out),
                                                                 QuantGeometry<kBits>{rows, n, format.block}, k, store);
    TRIAD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace triad::cuda
