// The AVX-512 VNNI kernel of the integer GEMM (tensor/cpu/int8_gemm_kernels.h): a register
// block of 4 tokens x 32 columns, 16 int32 lanes per column tile; vpdpbusd multiplies the
// tokens' u8 (int8 + 128) by the weights' signed bytes, four products a lane, and the +128
// is taken back by the group's PackedWeight::sums. Chosen at run time on CPUs that have it.
#include <immintrin.h>

// GCC 12's _mm512_cvtepi32_ps passes _mm512_undefined_ps() as its unused merge source,
// which -Wmaybe-uninitialized reports at every call.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>

#include "tensor/cpu/int8_gemm_kernels.h"

namespace triad::int8_gemm {

namespace {

constexpr int64_t kPair = 32;  // columns a register block covers
constexpr int kRows = 4;       // tokens a register block covers

#define TRIAD_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

TRIAD_VNNI inline __m512i load_run(const int8_t* run, bool four_bits) {
  if (!four_bits) return _mm512_loadu_si512(run);
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run));
  const __m256i nib = _mm256_set1_epi8(15);
  const __m256i lo = _mm256_and_si256(b, nib), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
  const __m512i u = _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1);
  const __m512i eight = _mm512_set1_epi8(8);
  return _mm512_sub_epi8(_mm512_xor_si512(u, eight), eight);  // sign-extend the nibbles
}

// Tokens r0 .. r0 + R of the column pair `pair`.
template <int R, bool FourBits, bool Offsets>
TRIAD_VNNI void block_vnni(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t r0,
                           const PackedWeight& w, int64_t pair, const float* bias, float* y) {
  const int64_t k = w.k, group = w.format.block, groups = k / group, np = w.padded_n();
  const float* scales = w.scales.data<float>();
  const float* offsets = Offsets ? w.offsets.data<float>() : nullptr;
  const int32_t* sums = w.sums.data<int32_t>();
  const int8_t* run0 = run_at(w, 2 * pair, 0);
  const int8_t* run1 = run_at(w, 2 * pair + 1, 0);
  const int64_t step = run_bytes(w);
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i d[R][2];
    for (int r = 0; r < R; ++r) d[r][0] = d[r][1] = _mm512_setzero_si512();
    for (int64_t quad = g * group / 4; quad < (g + 1) * group / 4; ++quad) {
      const __m512i w0 = load_run(run0 + quad * step, FourBits), w1 = load_run(run1 + quad * step, FourBits);
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, a + (r0 + r) * k + quad * 4, 4);
        const __m512i av = _mm512_set1_epi32(four);
        d[r][0] = _mm512_dpbusd_epi32(d[r][0], av, w0);
        d[r][1] = _mm512_dpbusd_epi32(d[r][1], av, w1);
      }
    }
    const int64_t col = g * np + pair * kPair;
    for (int h = 0; h < 2; ++h) {
      const __m512i c = _mm512_loadu_si512(sums + col + h * kTile);
      const __m512 s = _mm512_loadu_ps(scales + col + h * kTile);
      for (int r = 0; r < R; ++r) {
        acc[r][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d[r][h], c)), s, acc[r][h]);
        if constexpr (Offsets)
          acc[r][h] = _mm512_fmadd_ps(_mm512_set1_ps(float(a_sums[(r0 + r) * groups + g])),
                                      _mm512_loadu_ps(offsets + col + h * kTile), acc[r][h]);
      }
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t col = pair * kPair + h * kTile;
    if (col >= w.n) break;
    const __mmask16 mask = col + kTile <= w.n ? __mmask16(0xffff) : __mmask16((1u << (w.n - col)) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + col) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r)
      _mm512_mask_storeu_ps(y + (r0 + r) * w.n + col, mask,
                            _mm512_fmadd_ps(acc[r][h], _mm512_set1_ps(a_scales[r0 + r]), b));
  }
}

template <bool FourBits, bool Offsets>
TRIAD_VNNI void gemm_vnni(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m,
                          const PackedWeight& w, const float* bias, float* y) {
  const int64_t pairs = w.padded_n() / kPair, blocks = (m + kRows - 1) / kRows;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t pair = 0; pair < pairs; ++pair)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = b * kRows;
      switch (std::min<int64_t>(kRows, m - r0)) {
        case 4:
          block_vnni<4, FourBits, Offsets>(a, a_scales, a_sums, r0, w, pair, bias, y);
          break;
        case 3:
          block_vnni<3, FourBits, Offsets>(a, a_scales, a_sums, r0, w, pair, bias, y);
          break;
        case 2:
          block_vnni<2, FourBits, Offsets>(a, a_scales, a_sums, r0, w, pair, bias, y);
          break;
        default:
          block_vnni<1, FourBits, Offsets>(a, a_scales, a_sums, r0, w, pair, bias, y);
      }
    }
}

}  // namespace

void avx512_vnni(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
                 const float* bias, float* y) {
  const bool four = w.format.bits == 4, offsets = w.offsets.defined();
  if (four && offsets) return gemm_vnni<true, true>(a, a_scales, a_sums, m, w, bias, y);
  if (four) return gemm_vnni<true, false>(a, a_scales, a_sums, m, w, bias, y);
  if (offsets) return gemm_vnni<false, true>(a, a_scales, a_sums, m, w, bias, y);
  gemm_vnni<false, false>(a, a_scales, a_sums, m, w, bias, y);
}

}  // namespace triad::int8_gemm
