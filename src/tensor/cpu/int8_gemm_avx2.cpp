// The AVX2 kernel of the integer GEMM (tensor/cpu/int8_gemm_kernels.h), for x86-64 CPUs
// without AVX-512 VNNI, in two forms by the weights' width. AVX2 has no byte dot product into
// int32; its byte multiply (vpmaddubsw: unsigned by signed bytes, pairs summed into 16 bits)
// saturates for 8-bit operands.
// - 8-bit weights: 16-bit integers (vpmaddwd: two products summed into an int32 lane, exact
//   for any int8 operands). A run's 32 bytes for 8 columns hold each column's 4 inputs in one
//   32-bit word; read as 16-bit lanes, the even bytes (inputs 0 and 2) and the odd bytes (1
//   and 3), each sign-extended in place, are two vectors of 16-bit values, and the token's
//   inputs come as the matching pairs (a0, a2) and (a1, a3) broadcast to every word: two
//   vpmaddwd give each column's 4 products in its own int32 lane, the layout vpdpbusd gives.
//   The token's integers are signed here (u8 - 128), so the group's sum is the signed one
//   without PackedWeight::sums. A register block: up to 8 tokens x 8 columns.
// - Weights of 4 bits or fewer (|w| <= 8): vpmaddubsw of the tokens' u8 (int8 + 128, as
//   vpdpbusd takes them) by the weights' bytes, whose pair sums (at most 255 x 8 x 2 = 4080)
//   add up 8 quads in 16 bits without overflow before one vpmaddwd by ones widens them to the
//   column's int32 lane; PackedWeight::sums takes the +128 back. A register block: up to 4
//   tokens x 8 columns.
// Either way the int32 sums are exact and the epilogue is the other kernels' to the bit.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/int8_gemm_kernels.h"

namespace triad::int8_gemm {

namespace {

#define TRIAD_AVX2 __attribute__((target("avx2,fma")))

// Half h (columns 8 h .. 8 h + 7) of a run, as bytes (a 4-bit run's nibbles widened).
TRIAD_AVX2 inline __m256i load_half_avx2(const int8_t* run, bool four_bits, int h) {
  if (!four_bits) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 32 * h));
  __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run));
  if (h == 1) b = _mm256_srli_epi16(b, 4);
  const __m256i eight = _mm256_set1_epi8(8);
  return _mm256_sub_epi8(_mm256_xor_si256(_mm256_and_si256(b, _mm256_set1_epi8(15)), eight), eight);  // sign-extend
}

// y's rows r0 .. r0 + R over tile `tile`: acc times the token's scale, plus the bias.
template <int R>
TRIAD_AVX2 void store_rows(const float (&acc)[R][kTile], const float* a_scales, int64_t r0, const PackedWeight& w,
                           int64_t tile, const float* bias, float* y) {
  for (int h = 0; h < 2; ++h) {
    const int64_t col = tile * kTile + h * 8;
    if (col >= w.n) break;
    const int64_t live = std::min<int64_t>(8, w.n - col);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(live)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 b = bias ? _mm256_maskload_ps(bias + col, mask) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r)
      _mm256_maskstore_ps(y + (r0 + r) * w.n + col, mask,
                          _mm256_fmadd_ps(_mm256_load_ps(acc[r] + h * 8), _mm256_set1_ps(a_scales[r0 + r]), b));
  }
}

// Group g's int32 sums d of half h, plus the group's PackedWeight::sums where `sums` is given
// (tokens fed as u8), into the f32 sums: acc = fma(float(d), scale, acc), then the offset's
// term (the epilogue of tensor/cpu/int8_gemm_kernels.h).
template <int R, bool Offsets>
TRIAD_AVX2 inline void add_group(const __m256i (&d)[R], const int32_t* sums, const int32_t* a_sums, int64_t r0,
                                 const PackedWeight& w, int64_t g, int64_t tile, int h, float (&acc)[R][kTile]) {
  const int64_t groups = w.k / w.format.block, col = g * w.padded_n() + tile * kTile + h * 8;
  const __m256 s = _mm256_loadu_ps(w.scales.data<float>() + col);
  const __m256i c = sums ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + col)) : _mm256_setzero_si256();
  for (int r = 0; r < R; ++r) {
    __m256 sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(d[r], c)), s, _mm256_load_ps(acc[r] + h * 8));
    if constexpr (Offsets)
      sum = _mm256_fmadd_ps(_mm256_set1_ps(float(a_sums[(r0 + r) * groups + g])),
                            _mm256_loadu_ps(w.offsets.data<float>() + col), sum);
    _mm256_store_ps(acc[r] + h * 8, sum);
  }
}

// Tokens r0 .. r0 + R of tile `tile`, one 8-column half after the other in each group (the
// registers: R int32 sums, the half's widened weights and a token's inputs; the f32 sums in
// memory between groups). pairs: per token and quad, the words (a0 | a2 << 16) and
// (a1 | a3 << 16) of its signed integers.
template <int R, bool Offsets>
TRIAD_AVX2 void block_wide(const int32_t* pairs, const float* a_scales, const int32_t* a_sums, int64_t r0,
                           const PackedWeight& w, int64_t tile, const float* bias, float* y) {
  const int64_t k = w.k, quads = k / 4, group = w.format.block, groups = k / group;
  const int8_t* run0 = run_at(w, tile, 0);
  const int32_t* rows = pairs + r0 * quads * 2;
  alignas(32) float acc[R][kTile] = {};
  for (int64_t g = 0; g < groups; ++g)
    for (int h = 0; h < 2; ++h) {
      __m256i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm256_setzero_si256();
      for (int64_t quad = g * group / 4; quad < (g + 1) * group / 4; ++quad) {
        const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run0 + quad * 64 + 32 * h));
        const __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(half, 8), 8);  // inputs 0 and 2
        const __m256i odd = _mm256_srai_epi16(half, 8);                         // inputs 1 and 3
        for (int r = 0; r < R; ++r) {
          const int32_t* p = rows + (r * quads + quad) * 2;
          d[r] = _mm256_add_epi32(d[r], _mm256_add_epi32(_mm256_madd_epi16(even, _mm256_set1_epi32(p[0])),
                                                         _mm256_madd_epi16(odd, _mm256_set1_epi32(p[1]))));
        }
      }
      add_group<R, Offsets>(d, nullptr, a_sums, r0, w, g, tile, h, acc);
    }
  store_rows<R>(acc, a_scales, r0, w, tile, bias, y);
}

// Tokens r0 .. r0 + R of tile `tile` for weights of 4 bits or fewer (a: the tokens' u8).
template <int R, bool FourBits, bool Offsets>
TRIAD_AVX2 void block_narrow(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t r0,
                             const PackedWeight& w, int64_t tile, const float* bias, float* y) {
  constexpr int64_t kQuadsIn16Bits = 8;  // 8 x 4080 < 2^15
  const int64_t k = w.k, group = w.format.block, groups = k / group;
  const int32_t* sums = w.sums.data<int32_t>();
  const int8_t* run0 = run_at(w, tile, 0);
  const int64_t step = run_bytes(w);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float acc[R][kTile] = {};
  for (int64_t g = 0; g < groups; ++g)
    for (int h = 0; h < 2; ++h) {
      __m256i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm256_setzero_si256();
      for (int64_t q0 = g * group / 4, end = (g + 1) * group / 4; q0 < end; q0 += kQuadsIn16Bits) {
        __m256i pair_sums[R];
        for (int r = 0; r < R; ++r) pair_sums[r] = _mm256_setzero_si256();
        for (int64_t quad = q0; quad < std::min(end, q0 + kQuadsIn16Bits); ++quad) {
          const __m256i half = load_half_avx2(run0 + quad * step, FourBits, h);
          for (int r = 0; r < R; ++r) {
            int32_t four;
            std::memcpy(&four, a + (r0 + r) * k + quad * 4, 4);
            pair_sums[r] = _mm256_add_epi16(pair_sums[r], _mm256_maddubs_epi16(_mm256_set1_epi32(four), half));
          }
        }
        for (int r = 0; r < R; ++r) d[r] = _mm256_add_epi32(d[r], _mm256_madd_epi16(pair_sums[r], ones));
      }
      add_group<R, Offsets>(d, sums, a_sums, r0, w, g, tile, h, acc);
    }
  store_rows<R>(acc, a_scales, r0, w, tile, bias, y);
}

// Every token block of every tile: blocks of R tokens, the last ones by fewer.
template <int R, class Block>
void each_block(int64_t m, const PackedWeight& w, const Block& block) {
  const int64_t tiles = w.padded_n() / kTile, blocks = (m + R - 1) / R;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t tile = 0; tile < tiles; ++tile)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t r0 = b * R, end = std::min(m, r0 + R); r0 < end;) r0 += block(tile, r0, end - r0);
}

template <bool Offsets>
void gemm_wide(const int32_t* pairs, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
               const float* bias, float* y) {
  each_block<8>(m, w, [&](int64_t tile, int64_t r0, int64_t left) -> int64_t {
    const int64_t rows = left == 8 ? 8 : left >= 4 ? 4 : 1;
    if (rows == 8) block_wide<8, Offsets>(pairs, a_scales, a_sums, r0, w, tile, bias, y);
    if (rows == 4) block_wide<4, Offsets>(pairs, a_scales, a_sums, r0, w, tile, bias, y);
    if (rows == 1) block_wide<1, Offsets>(pairs, a_scales, a_sums, r0, w, tile, bias, y);
    return rows;
  });
}

template <bool FourBits, bool Offsets>
void gemm_narrow(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
                 const float* bias, float* y) {
  each_block<4>(m, w, [&](int64_t tile, int64_t r0, int64_t left) -> int64_t {
    const int64_t rows = left == 4 ? 4 : 1;
    if (rows == 4) block_narrow<4, FourBits, Offsets>(a, a_scales, a_sums, r0, w, tile, bias, y);
    if (rows == 1) block_narrow<1, FourBits, Offsets>(a, a_scales, a_sums, r0, w, tile, bias, y);
    return rows;
  });
}

}  // namespace

void avx2(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
          const float* bias, float* y) {
  const bool offsets = w.offsets.defined();
  if (w.format.bits == 4)
    return offsets ? gemm_narrow<true, true>(a, a_scales, a_sums, m, w, bias, y)
                   : gemm_narrow<true, false>(a, a_scales, a_sums, m, w, bias, y);
  if (w.format.bits < 4)  // stored a byte a value
    return offsets ? gemm_narrow<false, true>(a, a_scales, a_sums, m, w, bias, y)
                   : gemm_narrow<false, false>(a, a_scales, a_sums, m, w, bias, y);
  const int64_t quads = w.k / 4;
  std::vector<int32_t> pairs(size_t(m * quads * 2));
#pragma omp parallel for schedule(static) if (m * w.k > (1 << 15))
  for (int64_t r = 0; r < m; ++r)
    for (int64_t q = 0; q < quads; ++q) {
      const uint8_t* v = a + r * w.k + q * 4;
      auto word = [](int lo, int hi) {
        return int32_t(uint32_t(uint16_t(lo - 128)) | uint32_t(uint16_t(hi - 128)) << 16);
      };
      pairs[size_t((r * quads + q) * 2)] = word(v[0], v[2]);
      pairs[size_t((r * quads + q) * 2 + 1)] = word(v[1], v[3]);
    }
  offsets ? gemm_wide<true>(pairs.data(), a_scales, a_sums, m, w, bias, y)
          : gemm_wide<false>(pairs.data(), a_scales, a_sums, m, w, bias, y);
}

}  // namespace triad::int8_gemm
