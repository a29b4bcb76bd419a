// ops::pack_weight, ops::to, ops::packed_rows and ops::quantized_linear (tensor/quantized_matmul.h): argument
// checks, the per-token activation quantization (ops::quantize_blocks, on the tokens' device)
// and one backend call (the CPU's kernels: tensor/cpu/int8_gemm.cpp; the GPU's:
// cuda/backend/quantized_linear.cu).
#include "tensor/quantized_matmul.h"

#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/ops_checks.h"

namespace triad {

const char* int8_kernel_name(Int8Kernel kernel) {
  switch (kernel) {
    case Int8Kernel::best:
      return "best";
    case Int8Kernel::avx512_vnni:
      return "avx512-vnni";
    case Int8Kernel::avx2:
      return "avx2";
    case Int8Kernel::portable:
      return "portable";
  }
  return "?";
}

namespace ops {

std::vector<Int8Kernel> cpu_int8_kernels() {
  std::vector<Int8Kernel> kernels;
  for (Int8Kernel k : {Int8Kernel::avx512_vnni, Int8Kernel::avx2, Int8Kernel::portable})
    if (cpu_has_int8_kernel(k)) kernels.push_back(k);
  return kernels;
}

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

PackedWeight to(const PackedWeight& w, Device device) {
  PackedWeight moved = w;
  for (Tensor* t : {&moved.data, &moved.scales, &moved.offsets, &moved.sums})
    if (t->defined()) *t = to(*t, device);
  return moved;
}

Tensor packed_rows(const PackedWeight& w, const Tensor& indices) {
  TRIAD_CHECK(w.data.defined(), "packed_rows: the weight is not packed (ops::pack_weight)");
  TRIAD_CHECK(w.format.symmetric, "packed_rows: expected a symmetric format, got an asymmetric "
                                      << w.format.bits << "-bit one (its rows are not looked up)");
  const Device device = w.data.device();
  const Tensor idx = check_indices(indices, device, w.n, std::nullopt, /*wide=*/true, "packed_rows");
  Shape shape = indices.shape();
  shape.push_back(w.k);
  Tensor out = Tensor::empty(shape, DType::f32, device);
  if (idx.numel() > 0) backend_for(device).packed_rows(w, idx, out);
  return out;
}

Tensor quantized_linear(const Tensor& x, const PackedWeight& w, const Tensor& bias, int abits, Int8Kernel kernel) {
  TRIAD_CHECK(abits == 8 || abits == 16, "quantized_linear: activation bits must be 8 or 16, got " << abits);
  TRIAD_CHECK(w.data.defined(), "quantized_linear: the weight is not packed (ops::pack_weight)");
  TRIAD_CHECK(x.dim() >= 1 && x.size(-1) == w.k &&
                  (x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16),
              "quantized_linear: expected a floating x (..., " << w.k << "), got " << x.str());
  const Device device = x.device();
  TRIAD_CHECK(w.data.device() == device, "quantized_linear: x is on " << device.str() << ", the packed weight on "
                                                                      << w.data.device().str()
                                                                      << " (ops::to moves a PackedWeight)");
  TRIAD_CHECK(
      !bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape({w.n}) && bias.device() == device),
      "quantized_linear: expected a bias of f32 (" << w.n << ") on " << device.str() << ", got " << bias.str());
  const int64_t m = x.numel() / w.k;
  Shape shape = x.shape();
  shape.back() = w.n;
  const Tensor x2 = contiguous(reshape(x, {m, w.k}));
  Tensor y = Tensor::empty({m, w.n}, DType::f32, device);
  const Tensor b = bias.defined() ? contiguous(bias) : bias;
  if (m > 0 && abits == 16)
    backend_for(device).quantized_linear(contiguous(to(x2, DType::f32)), Tensor(), w, b, y, 16, kernel);
  if (m > 0 && abits == 8) {
    const Quantized tokens = quantize_blocks(x2, QuantFormat{8, w.k});
    backend_for(device).quantized_linear(tokens.q, tokens.scales, w, b, y, 8, kernel);
  }
  return to(reshape(y, shape), x.dtype());
}

}  // namespace ops

}  // namespace triad
