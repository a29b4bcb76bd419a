// The integer GEMM of ops::quantized_linear (tensor/quantized_matmul.h) and its weight
// packing. Activations enter as u8 (their int8 value + 128) because vpdpbusd multiplies
// unsigned by signed bytes; the +128 is taken back exactly by each group's precomputed
// -128 x (sum of its weights), so the int32 sums are those of the signed integers.
// Two kernels compute the same sums and the same f32 epilogue (fused multiply-adds, explicit
// in both, whatever the compiler contracts) in the same order of groups: an AVX-512 VNNI one
// (a register block of 4 tokens x 32 columns, 16 int32 lanes per column tile) chosen at run
// time on CPUs that have it, and a portable one. The GPU's kernel computes them too (Note
// [Integer GEMM on the GPU] in cuda/backend/quantized_linear_kernels.cuh). CpuBackend::
// quantized_linear is the backend's entry.
#include <immintrin.h>

// GCC 12's _mm512_cvtepi32_ps passes _mm512_undefined_ps() as its unused merge source,
// which -Wmaybe-uninitialized reports at every call.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/quantized_matmul.h"

namespace triad {

namespace {

constexpr int64_t kTile = 16;  // columns of a tile: one vector of int32 lanes
constexpr int64_t kPair = 32;  // columns a register block covers
constexpr int kRows = 4;       // tokens a register block covers

// Bytes of one run of 64 values (a tile's 16 columns x 4 inputs).
int64_t run_bytes(const PackedWeight& w) { return w.format.bits == 4 ? 32 : 64; }

const int8_t* run_at(const PackedWeight& w, int64_t tile, int64_t quad) {
  return w.data.data<int8_t>() + (tile * (w.k / 4) + quad) * run_bytes(w);
}

// Value v (0..63) of a run, as stored.
inline int run_value(const int8_t* run, int bits, int v) {
  if (bits != 4) return run[v];
  const int b = uint8_t(run[v % 32]);
  const int nib = v < 32 ? b & 15 : b >> 4;
  return nib >= 8 ? nib - 16 : nib;
}

// ---- portable kernel ----

void gemm_portable(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
                   const float* bias, float* y) {
  const int64_t k = w.k, group = w.format.block, groups = k / group, np = w.padded_n();
  const float* scales = w.scales.data<float>();
  const float* offsets = w.offsets.defined() ? w.offsets.data<float>() : nullptr;
  const int32_t* sums = w.sums.data<int32_t>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t tile = 0; tile < np / kTile; ++tile)
    for (int64_t r = 0; r < m; ++r) {
      float acc[kTile] = {};
      for (int64_t g = 0; g < groups; ++g) {
        int32_t d[kTile] = {};
        for (int64_t quad = g * group / 4; quad < (g + 1) * group / 4; ++quad) {
          const int8_t* run = run_at(w, tile, quad);
          const uint8_t* av = a + r * k + quad * 4;
          for (int c = 0; c < kTile; ++c)
            for (int i = 0; i < 4; ++i) d[c] += int32_t(av[i]) * run_value(run, w.format.bits, c * 4 + i);
        }
        for (int c = 0; c < kTile; ++c) {
          const int64_t col = g * np + tile * kTile + c;
          acc[c] = std::fma(float(d[c] + sums[col]), scales[col], acc[c]);
          if (offsets) acc[c] = std::fma(float(a_sums[r * groups + g]), offsets[col], acc[c]);
        }
      }
      for (int c = 0; c < kTile; ++c) {
        const int64_t col = tile * kTile + c;
        if (col < w.n) y[r * w.n + col] = std::fma(acc[c], a_scales[r], bias ? bias[col] : 0.0f);  // as vfmadd
      }
    }
}

// ---- AVX-512 VNNI kernel ----

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

bool cpu_has_vnni() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

void cpu_int8_gemm(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
                   const float* bias, float* y, bool vnni) {
  if (!vnni) return gemm_portable(a, a_scales, a_sums, m, w, bias, y);
  const bool four = w.format.bits == 4, offsets = w.offsets.defined();
  if (four && offsets) return gemm_vnni<true, true>(a, a_scales, a_sums, m, w, bias, y);
  if (four) return gemm_vnni<true, false>(a, a_scales, a_sums, m, w, bias, y);
  if (offsets) return gemm_vnni<false, true>(a, a_scales, a_sums, m, w, bias, y);
  gemm_vnni<false, false>(a, a_scales, a_sums, m, w, bias, y);
}

void CpuBackend::quantized_linear(const Tensor& a, const Tensor& a_scales, const PackedWeight& w, const Tensor& bias,
                                  const Tensor& y, int abits, Int8Kernel kernel) {
  const int64_t m = y.size(0), k = w.k, group = w.format.block, groups = k / group;
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  if (abits == 16) return cpu_widened_gemm(a.data<float>(), m, w, bp, y.data<float>());
  Tensor u = Tensor::empty({m, k}, DType::i8);  // read as u8
  Tensor sums = w.offsets.defined() ? Tensor::empty({m, groups}, DType::i32) : Tensor();
  const int8_t* q = a.data<int8_t>();
  uint8_t* up = reinterpret_cast<uint8_t*>(u.data<int8_t>());
  int32_t* sp = sums.defined() ? sums.data<int32_t>() : nullptr;
#pragma omp parallel for schedule(static) if (m * k > (1 << 15))
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) up[r * k + i] = uint8_t(q[r * k + i] + 128);
    if (sp)
      for (int64_t g = 0; g < groups; ++g) {
        int32_t s = 0;
        for (int64_t i = g * group; i < (g + 1) * group; ++i) s += q[r * k + i];
        sp[r * groups + g] = s;
      }
  }
  cpu_int8_gemm(up, a_scales.data<float>(), sp, m, w, bp, y.data<float>(),
                kernel == Int8Kernel::best && cpu_has_vnni());
}

void cpu_widened_gemm(const float* x, int64_t m, const PackedWeight& w, const float* bias, float* y) {
  const int64_t k = w.k, group = w.format.block, np = w.padded_n();
  const float* scales = w.scales.data<float>();
  const float* offsets = w.offsets.defined() ? w.offsets.data<float>() : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t tile = 0; tile < np / kTile; ++tile) {
    std::vector<float> wide(size_t(kTile * k));  // (16 columns, K)
    for (int64_t quad = 0; quad < k / 4; ++quad) {
      const int8_t* run = run_at(w, tile, quad);
      for (int c = 0; c < kTile; ++c)
        for (int i = 0; i < 4; ++i) {
          const int64_t in = quad * 4 + i, col = (in / group) * np + tile * kTile + c;
          wide[c * k + in] =
              float(run_value(run, w.format.bits, c * 4 + i)) * scales[col] + (offsets ? offsets[col] : 0);
        }
    }
    for (int c = 0; c < kTile; ++c) {
      const int64_t col = tile * kTile + c;
      if (col >= w.n) break;
      for (int64_t r = 0; r < m; ++r) {
        float s = 0;
        const float* xr = x + r * k;
        const float* wc = wide.data() + c * k;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < k; ++i) s += xr[i] * wc[i];
        y[r * w.n + col] = s + (bias ? bias[col] : 0.0f);
      }
    }
  }
}

void cpu_pack_weight(const Quantized& q, PackedWeight& w) {
  const int64_t n = w.n, k = w.k, np = w.padded_n(), group = w.format.block, groups = k / group;
  const int64_t row_bytes = w.format.bytes(k), per_row = w.format.blocks(k);
  const bool binary = w.format.symmetric && w.format.bits == 1, four = w.format.bits == 4;
  const int8_t* qp = q.q.data<int8_t>();
  const float* sp = q.scales.data<float>();
  const float* op = q.offsets.defined() ? q.offsets.data<float>() : nullptr;
  int8_t* data = w.data.data<int8_t>();
  float* scales = w.scales.data<float>();
  float* offsets = op ? w.offsets.data<float>() : nullptr;
  int32_t* sums = w.sums.data<int32_t>();
  std::memset(data, 0, size_t(w.data.numel()));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t col = 0; col < np; ++col) {
      const int64_t at = g * np + col;
      const bool real = col < n;
      scales[at] = real ? sp[col * per_row + g] : 0.0f;
      if (offsets) offsets[at] = real ? op[col * per_row + g] : 0.0f;
      int32_t sum = 0;
      for (int64_t in = g * group; real && in < (g + 1) * group; ++in)
        sum += quant_field(qp + col * row_bytes, w.format.bits, binary, in);
      sums[at] = -128 * sum;
    }
  for (int64_t col = 0; col < n; ++col)
    for (int64_t in = 0; in < k; ++in) {
      const int v = quant_field(qp + col * row_bytes, w.format.bits, binary, in);
      const int64_t tile = col / kTile, value = (col % kTile) * 4 + in % 4;
      int8_t* run = data + (tile * (k / 4) + in / 4) * (four ? 32 : 64);
      if (!four)
        run[value] = int8_t(v);
      else if (value < 32)
        run[value] = int8_t(uint8_t(run[value]) | (v & 15));
      else
        run[value - 32] = int8_t(uint8_t(run[value - 32]) | ((v & 15) << 4));
    }
}

}  // namespace triad
