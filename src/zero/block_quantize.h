// Symmetric block-wise quantization of flat tensors, the arithmetic of ZeRO++'s qwZ (int8)
// and qgZ (int4). A block of `block` consecutive elements (the last may be shorter) keeps
// one f32 scale s = max|x| / qmax (qmax 127 for int8, 7 for int4) and each element as
// q = x / s rounded to nearest even, so |x − q·s| <= s/2; an all-zero block has s = 0. A
// block holding a NaN or an infinity gets a NaN scale, so every element of it dequantizes to
// NaN and overflow checks still see it. int4 packs two elements per byte, the even element
// in the low nibble (two's complement nibbles). Host tensors.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace triad::zero {

// Bytes of n quantized elements, and their number of blocks.
inline int64_t quantized_bytes(int64_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }
inline int64_t quantized_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// x: n contiguous f32, bf16 or f16 elements; q: quantized_bytes(n) i8; scales:
// quantized_blocks(n) f32. bits 8 or 4.
void quantize_blocks(const Tensor& x, int bits, int64_t block, const Tensor& q, const Tensor& scales);
// out (n contiguous f32, bf16 or f16) = the dequantized values.
void dequantize_blocks(const Tensor& q, const Tensor& scales, int bits, int64_t block, const Tensor& out);
// out (n f32) = the sum of k dequantized chunks of n elements: q holds k·quantized_bytes(n)
// bytes, scales k·quantized_blocks(n); summed in chunk order.
void dequantize_sum(const Tensor& q, const Tensor& scales, int bits, int64_t block, int64_t k, const Tensor& out);

}  // namespace triad::zero
