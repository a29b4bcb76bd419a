// fake_quantize: quantize-dequantize forward, straight-through backward (fake_quantize.h).
#include "autograd/fake_quantize.h"

#include "autograd/record.h"
#include "tensor/error.h"

namespace triad {

Tensor fake_quantize(const Tensor& w, const QuantFormat& format) {
  TRIAD_CHECK(format.bits == 8 || format.bits == 4 || format.bits == 2 || format.bits == 1,
              "fake_quantize: bits " << format.bits << ", expected 8, 4, 2 or 1");
  TRIAD_CHECK(w.dim() == 2, "fake_quantize: weight of shape " << shape_str(w.shape()) << ", expected (N, K)");
  const int64_t k = w.shape()[1];
  TRIAD_CHECK(format.block > 0 && k % format.block == 0,
              "fake_quantize: group size " << format.block << " does not divide the input dimension " << k);
  const Tensor src = ops::contiguous(detach(w));
  const Quantized q = ops::quantize_blocks(src, format);
  const Tensor y = Tensor::empty(w.shape(), w.dtype(), w.device());
  ops::dequantize_blocks(q, y, format);
  return record("fake_quantize", {w}, y, [](const Grads& g) { return Grads{g[0]}; });
}

}  // namespace triad
