// The CPU's integer GEMM kernels of ops::quantized_linear (tensor/quantized_matmul.h) and the
// packed weight's layout they read. Every kernel computes, for each token r and column c, the
// same int32 sum per weight group of the signed products (a kernel fed the tokens as u8 =
// int8 + 128 adds back the group's precomputed -128 x sum of its weights, PackedWeight::
// sums) and the same f32 epilogue, fused multiply-adds in the same order, so all of them
// give the same bits:
//   acc = fma(float(sum_g), scale_g, acc)            for each group g in order, from acc = 0,
//   acc = fma(float(token's sum over g), offset_g, acc)   after it, asymmetric weights only,
//   y   = fma(acc, token scale, bias)
// The kernels: portable C++ (int8_gemm.cpp), AVX2 (int8_gemm_avx2.cpp) and AVX-512 VNNI
// (int8_gemm_avx512.cpp), chosen by CpuBackend::quantized_linear.
#pragma once

#include <cstdint>

#include "tensor/quantized_matmul.h"

namespace triad::int8_gemm {

constexpr int64_t kTile = 16;  // columns of a tile

// Bytes of one run of 64 values (a tile's 16 columns x 4 inputs).
inline int64_t run_bytes(const PackedWeight& w) { return w.format.bits == 4 ? 32 : 64; }

// The run of inputs 4 quad .. 4 quad + 3 of tile `tile`.
inline const int8_t* run_at(const PackedWeight& w, int64_t tile, int64_t quad) {
  return w.data.data<int8_t>() + (tile * (w.k / 4) + quad) * run_bytes(w);
}

// Value v (0..63) of a run, as stored.
inline int run_value(const int8_t* run, int bits, int v) {
  if (bits != 4) return run[v];
  const int b = uint8_t(run[v % 32]);
  const int nib = v < 32 ? b & 15 : b >> 4;
  return nib >= 8 ? nib - 16 : nib;
}

// The kernels' common signature: a u8 (m, k), the tokens' integers + 128; a_scales f32 (m);
// a_sums i32 (m, k / group), the integers summed per group (asymmetric weights, else null);
// y f32 (m, w.n); bias f32 (w.n) or null.
using Kernel = void (*)(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m,
                        const PackedWeight& w, const float* bias, float* y);

void portable(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
              const float* bias, float* y);
void avx2(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
          const float* bias, float* y);
void avx512_vnni(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
                 const float* bias, float* y);

// Whether this CPU runs the kernel.
bool cpu_has(Int8Kernel kernel);

}  // namespace triad::int8_gemm
