// Fake quantization for quantization-aware training (ZeroQuant's layer-by-layer distillation,
// XTC): the forward rounds a weight to what its quantized form holds, the backward passes the
// gradient straight through (the straight-through estimator), so the full-precision weight
// keeps training while the loss sees the quantized one.
#pragma once

#include "tensor/ops.h"

namespace triad {

// w (N, K) quantized row by row along K with ops::quantize_blocks(w, format) and dequantized
// back, in w's dtype: the values a quantized layer of this format computes with. The
// gradient with respect to w is the incoming gradient unchanged (identity STE: no value is
// clipped by a max-|x| or min/max scale, so no mask applies). XTC's formats are the library's
// own: 1 bit (symmetric) is sign(w) times the block's mean |w| (XTC's binary weights, one
// scale per row when format.block == K); 2 bits symmetric is XTC's ternary (TWN): sign(w)
// where |w| > 0.7 mean |w| of the block, else 0, times the mean |w| above that threshold.
// Activations quantized per token are the same call on x (M, K) with QuantFormat{8, K}.
// Throws Error naming the format when bits is not 8, 4, 2 or 1, or when format.block does
// not divide K (a group would straddle two rows' worth of scales).
Tensor fake_quantize(const Tensor& w, const QuantFormat& format);

}  // namespace triad
