// ops::pack_weight and ops::quantized_linear (tensor/quantized_matmul.h): argument checks,
// the per-token activation quantization, and one call of the CPU kernels
// (tensor/cpu/int8_gemm.cpp).
#include "tensor/quantized_matmul.h"

#include "tensor/cpu/cpu_backend.h"

namespace triad::ops {

bool has_int8_vnni() { return cpu_has_vnni(); }

PackedWeight pack_weight(const Quantized& w, int64_t n, int64_t k, const QuantFormat& format) {
  const int64_t group = format.block;
  TRIAD_CHECK(format.bits == 8 || format.bits == 4 || format.bits == 2 || format.bits == 1,
              "pack_weight: bits must be 8, 4, 2 or 1, got " << format.bits);
  TRIAD_CHECK(n > 0 && k > 0, "pack_weight: expected a weight of positive (N, K), got (" << n << ", " << k << ")");
  TRIAD_CHECK(group > 0 && k % group == 0,
              "pack_weight: the group size " << group << " must divide the input dimension " << k);
  TRIAD_CHECK(group % 4 == 0, "pack_weight: the group size must be a multiple of 4, got " << group);
  TRIAD_CHECK(w.q.device().is_cpu() && w.q.dtype() == DType::i8 && w.q.shape() == Shape({n, format.bytes(k)}),
              "pack_weight: expected q of i8 (" << n << ", " << format.bytes(k) << ") on the CPU, got " << w.q.str());
  TRIAD_CHECK(w.scales.dtype() == DType::f32 && w.scales.shape() == Shape({n, k / group}),
              "pack_weight: expected scales of f32 (" << n << ", " << k / group << "), got " << w.scales.str());
  TRIAD_CHECK(format.symmetric == !w.offsets.defined() && (format.symmetric || w.offsets.shape() == w.scales.shape()),
              "pack_weight: expected offsets exactly for an asymmetric format, like scales");
  PackedWeight p;
  p.n = n;
  p.k = k;
  p.format = format;
  const int64_t np = p.padded_n();
  p.data = Tensor::empty({np / 16, k / 4, format.bits == 4 ? 32 : 64}, DType::i8);
  p.scales = Tensor::empty({k / group, np});
  if (!format.symmetric) p.offsets = Tensor::empty({k / group, np});
  p.sums = Tensor::empty({k / group, np}, DType::i32);
  cpu_pack_weight({contiguous(w.q), contiguous(w.scales), w.offsets.defined() ? contiguous(w.offsets) : Tensor()}, p);
  return p;
}

Tensor quantized_linear(const Tensor& x, const PackedWeight& w, const Tensor& bias, int abits, Int8Kernel kernel) {
  TRIAD_CHECK(abits == 8 || abits == 16, "quantized_linear: activation bits must be 8 or 16, got " << abits);
  TRIAD_CHECK(w.data.defined(), "quantized_linear: the weight is not packed (ops::pack_weight)");
  TRIAD_CHECK(x.device().is_cpu() && x.dim() >= 1 && x.size(-1) == w.k &&
                  (x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16),
              "quantized_linear: expected a floating x (..., " << w.k << ") on the CPU, got " << x.str());
  TRIAD_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape({w.n})),
              "quantized_linear: expected a bias of f32 (" << w.n << "), got " << bias.str());
  const int64_t m = x.numel() / w.k;
  Shape shape = x.shape();
  shape.back() = w.n;
  const Tensor x2 = contiguous(to(reshape(x, {m, w.k}), DType::f32));
  Tensor y = Tensor::empty({m, w.n});
  const Tensor b = bias.defined() ? contiguous(bias) : bias;
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  if (m > 0 && abits == 16) cpu_widened_gemm(x2.data<float>(), m, w, bp, y.data<float>());
  if (m > 0 && abits == 8) {
    const Quantized tokens = quantize_blocks(x2, QuantFormat{8, w.k});
    const int64_t groups = w.k / w.format.block;
    Tensor a = Tensor::empty({m, w.k}, DType::i8);  // read as u8
    Tensor sums = w.offsets.defined() ? Tensor::empty({m, groups}, DType::i32) : Tensor();
    const int8_t* q = tokens.q.data<int8_t>();
    uint8_t* ap = reinterpret_cast<uint8_t*>(a.data<int8_t>());
    int32_t* sp = sums.defined() ? sums.data<int32_t>() : nullptr;
#pragma omp parallel for schedule(static) if (m * w.k > (1 << 15))
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < w.k; ++i) ap[r * w.k + i] = uint8_t(q[r * w.k + i] + 128);
      if (sp)
        for (int64_t g = 0; g < groups; ++g) {
          int32_t s = 0;
          for (int64_t i = g * w.format.block; i < (g + 1) * w.format.block; ++i) s += q[r * w.k + i];
          sp[r * groups + g] = s;
        }
    }
    cpu_int8_gemm(ap, tokens.scales.data<float>(), sp, m, w, bp, y.data<float>(),
                  kernel == Int8Kernel::best && cpu_has_vnni());
  }
  return to(reshape(y, shape), x.dtype());
}

}  // namespace triad::ops
