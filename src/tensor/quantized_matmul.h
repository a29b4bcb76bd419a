// Integer GEMM for quantized linear layers (ZeroQuant's W8A8 and W4A8, and weight-only
// W*A16): a weight quantized along its input dimension in groups by ops::quantize_blocks,
// packed once into the GEMM's layout, times activations quantized per token on the fly.
// The products accumulate in int32 per group and the group's scale (and offset) is applied
// in f32 as the group ends, so a weight is never widened to an f32 copy. On the CPU and on a
// GPU (cuda/backend/quantized_linear.cu), which gives the CPU's results bit for bit at 8
// activation bits (Note [Integer GEMM on the GPU]).
#pragma once

#include "tensor/ops.h"

namespace triad {

// A weight (N, K) laid out for ops::quantized_linear (ops::pack_weight). Columns are padded
// to a multiple of 32 (zero weights, zero scales) and cut into tiles of 16; a tile's values
// for inputs 4j .. 4j + 3 are 64 consecutive integers (column c, input i at c 4 + i), the
// order in which AVX-512 VNNI's vpdpbusd consumes them. At 4 bits each such run is 32 bytes
// (value v in the low nibble of byte v, value v + 32 in the high one), widened to bytes as
// the GEMM loads it; 8-, 2- and 1-bit weights are stored one value a byte. A GPU reads the
// same layout (ops::to copies the bytes).
struct PackedWeight {
  int64_t n = 0, k = 0;  // the weight's (N, K)
  QuantFormat format;    // as quantized: bits, group size (format.block), symmetric
  Tensor data;           // i8, as above
  Tensor scales;         // f32 (K / group, padded N)
  Tensor offsets;        // f32 (K / group, padded N); undefined for a symmetric format
  Tensor sums;           // i32 (K / group, padded N): -128 x the sum of the group's integers
  int64_t padded_n() const { return (n + 31) / 32 * 32; }
};

// Which integer kernel ops::quantized_linear runs on the CPU: the fastest this CPU has
// (best), or a named one: AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddwd on the integers widened to
// 16 bits: any x86-64 since 2013) or the portable C++ every CPU runs. All give the same bits
// (tensor/cpu/int8_gemm_kernels.h). A GPU has one kernel and ignores the choice.
enum class Int8Kernel { best, avx512_vnni, avx2, portable };

// "best", "avx512-vnni", "avx2", "portable".
const char* int8_kernel_name(Int8Kernel kernel);

namespace ops {

// The integer kernels this CPU runs, fastest first (the first is what best runs; portable
// last, always present).
std::vector<Int8Kernel> cpu_int8_kernels();

// Packs w, the result of ops::quantize_blocks(weight (N, K), format) on the CPU, for the
// GEMM. The group (format.block) must divide K and be a multiple of 4 (a VNNI step): any
// other shape throws, naming it.
PackedWeight pack_weight(const Quantized& w, int64_t n, int64_t k, const QuantFormat& format);

// w with its tensors on `device` (a copy of the bytes; packing itself runs on the CPU).
PackedWeight to(const PackedWeight& w, Device device);

// Rows `indices` (..., i64 or i32, in [0, N)) of the weight, dequantized: (..., K) f32 on w's
// device, row t's value i = its integer times the scale of its group, as ops::dequantize_blocks
// computes it from ops::quantize_blocks's q and scales (bit for bit). A quantized token table
// (nn::Embedding::use_quantized) looks its rows up so, from the one packed copy that its tied
// output head multiplies by. Symmetric formats only (an Error otherwise); an index out of range
// throws Error on the CPU, and on a GPU gives a zero row reported at the next wait (Note
// [Deferred device errors]).
Tensor packed_rows(const PackedWeight& w, const Tensor& indices);

// y (..., N) = x (..., K) w^T + bias, x f32 (or bf16/f16, computed from f32) on w's device,
// bias f32 (N) or undefined, on that device too; y has x's dtype.
// abits 8: every row of x (a token) is quantized symmetrically to int8 on its own
// (ops::quantize_blocks with one block a row), the products of integers are summed exactly
// in int32 per weight group, and y = token scale x sum over groups of (group scale x that
// sum + group offset x the token's integers summed over the group), in f32.
// abits 16: x stays in floating point; w is widened a 32-column tile at a time (on a GPU
// as it loads; a GPU adds the products in another order: equal to f32 rounding).
Tensor quantized_linear(const Tensor& x, const PackedWeight& w, const Tensor& bias, int abits,
                        Int8Kernel kernel = Int8Kernel::best);

}  // namespace ops
}  // namespace triad
