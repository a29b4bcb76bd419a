// Block-wise quantization ops of tensor/ops.h: argument checks, result allocation, one
// backend call each. A tensor (..., n) is handled as rows of n values, each row quantized
// on its own, so q and scales keep the source's leading dimensions. The symmetric 8- and
// 4-bit formats go to the device's backend; the other formats to the CPU's generic kernel.
#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/ops.h"

namespace triad::ops {

namespace {

void check_format(const QuantFormat& f, const char* op) {
  TRIAD_CHECK(f.bits == 8 || f.bits == 4 || f.bits == 2 || f.bits == 1,
              op << ": bits must be 8, 4, 2 or 1, got " << f.bits);
  TRIAD_CHECK(f.block > 0, op << ": block must be positive, got " << f.block);
  TRIAD_CHECK(f.block * f.bits % 8 == 0, op << ": a " << f.bits << "-bit block must fill whole bytes (a multiple of "
                                            << 8 / f.bits << " elements), got " << f.block);
}

// The formats every backend builds (ZeRO++'s); the others run on the CPU alone.
bool on_backend(const QuantFormat& f) { return f.symmetric && (f.bits == 8 || f.bits == 4); }

void check_cpu(const QuantFormat& f, Device device, const char* op) {
  TRIAD_CHECK(on_backend(f) || device.is_cpu(), op << ": the " << (f.symmetric ? "symmetric " : "asymmetric ") << f.bits
                                                   << "-bit format runs on the CPU, got a tensor on " << device.str());
}

bool is_quantizable(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// shape with its last dimension replaced by `last`.
Shape with_last(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

}  // namespace

Quantized quantize_blocks(const Tensor& src, const QuantFormat& format) {
  check_format(format, "quantize_blocks");
  TRIAD_CHECK(is_quantizable(src.dtype()), "quantize_blocks: expected an f32, bf16 or f16 source, got " << src.str());
  TRIAD_CHECK(src.dim() >= 1, "quantize_blocks: expected a source with at least 1 dimension, got " << src.str());
  check_cpu(format, src.device(), "quantize_blocks");
  const int64_t n = src.size(-1), rows = n ? src.numel() / n : 0;
  Quantized r{Tensor::empty(with_last(src.shape(), format.bytes(n)), DType::i8, src.device()),
              Tensor::empty(with_last(src.shape(), format.blocks(n)), DType::f32, src.device()), Tensor()};
  if (!format.symmetric) r.offsets = Tensor::empty(r.scales.shape(), DType::f32, src.device());
  if (src.numel() == 0) return r;
  if (on_backend(format))
    backend_for(src.device()).quantize_blocks(contiguous(src), r.q, r.scales, rows, n, format);
  else
    cpu_quantize_blocks(contiguous(src), r.q, r.scales, r.offsets, rows, n, format);
  return r;
}

namespace {

// q (rows k, bytes(n)) and scales (rows k, blocks(n)) for an out of rows (rows, n), where
// `shape` is what q and scales have besides their last dimension.
void dequantize(const Tensor& q, const Tensor& scales, const Tensor& offsets, const Tensor& out, const Shape& shape,
                int64_t rows, int64_t k, int64_t n, const QuantFormat& format, const char* op) {
  check_format(format, op);
  check_cpu(format, out.device(), op);
  TRIAD_CHECK(is_quantizable(out.dtype()) && out.is_contiguous(),
              op << ": expected a contiguous f32, bf16 or f16 output, got " << out.str());
  TRIAD_CHECK(q.dtype() == DType::i8 && q.shape() == with_last(shape, format.bytes(n)),
              op << ": expected q of i8 " << shape_str(with_last(shape, format.bytes(n))) << " for " << n
                 << " values a row at " << format.bits << " bits, got " << q.str());
  TRIAD_CHECK(scales.dtype() == DType::f32 && scales.shape() == with_last(shape, format.blocks(n)),
              op << ": expected scales of f32 " << shape_str(with_last(shape, format.blocks(n))) << " (blocks of "
                 << format.block << "), got " << scales.str());
  TRIAD_CHECK(format.symmetric == !offsets.defined(),
              op << ": "
                 << (format.symmetric ? "a symmetric format has no offsets, got " + offsets.str()
                                      : std::string("an asymmetric format needs offsets")));
  TRIAD_CHECK(!offsets.defined() || (offsets.dtype() == DType::f32 && offsets.shape() == scales.shape()),
              op << ": expected offsets of f32 " << shape_str(scales.shape()) << ", got " << offsets.str());
  TRIAD_CHECK(q.device() == out.device() && scales.device() == out.device(),
              op << ": devices differ: " << q.str() << ", " << scales.str() << ", " << out.str());
  if (out.numel() == 0) return;
  if (k == 0) {  // the sum of no slices
    zero_(out);
    return;
  }
  if (on_backend(format))
    backend_for(out.device()).dequantize_blocks(contiguous(q), contiguous(scales), out, rows, k, n, format);
  else
    cpu_dequantize_blocks(contiguous(q), contiguous(scales), offsets.defined() ? contiguous(offsets) : offsets, out,
                          rows, k, n, format);
}

}  // namespace

void dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& out, const QuantFormat& format) {
  TRIAD_CHECK(out.dim() >= 1, "dequantize_blocks: expected an output with at least 1 dimension, got " << out.str());
  const int64_t n = out.size(-1), rows = n ? out.numel() / n : 0;
  dequantize(q, scales, Tensor(), out, out.shape(), rows, 1, n, format, "dequantize_blocks");
}

void dequantize_blocks(const Quantized& x, const Tensor& out, const QuantFormat& format) {
  TRIAD_CHECK(out.dim() >= 1, "dequantize_blocks: expected an output with at least 1 dimension, got " << out.str());
  const int64_t n = out.size(-1), rows = n ? out.numel() / n : 0;
  dequantize(x.q, x.scales, x.offsets, out, out.shape(), rows, 1, n, format, "dequantize_blocks");
}

void dequantize_reduce(const Tensor& q, const Tensor& scales, const Tensor& out, const QuantFormat& format) {
  TRIAD_CHECK(out.dim() == 1 && q.dim() == 2,
              "dequantize_reduce: expected q (k, bytes) and an output (n), got " << q.str() << " and " << out.str());
  dequantize(q, scales, Tensor(), out, {q.size(0), 0}, 1, q.size(0), out.size(0), format, "dequantize_reduce");
}

}  // namespace triad::ops
