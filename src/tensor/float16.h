// The bf16 and f16 element conversions, written once for the CPU and the GPU: tensor/dtype.h's
// bf16 and f16 types convert with them, and so do the CUDA backend's kernels
// (cuda/backend/convert.cuh), so copies and casts on either device give the same bits.
// Both round to nearest even; a NaN stays a NaN (bf16 keeps its sign and upper payload and
// sets the quiet bit; f16 becomes the quiet NaN 0x7e00 with its sign); f16 handles
// subnormals and rounds overflow to infinity.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/host_device.h"

namespace triad {

namespace detail {

// The bits of f, and the float of bits u (memcpy: defined behaviour on both compilers,
// one register move once optimised).
TRIAD_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
TRIAD_HOST_DEVICE inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace detail

// bfloat16 is the upper half of an IEEE float.
TRIAD_HOST_DEVICE inline float bf16_to_float(uint16_t bits) { return detail::bits_to_float(uint32_t(bits) << 16); }

TRIAD_HOST_DEVICE inline uint16_t float_to_bf16(float f) {
  uint32_t u = detail::float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE binary16.
TRIAD_HOST_DEVICE inline uint16_t float_to_f16(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow to inf
  if (absx < 0x38800000u) {                                  // subnormal or zero
    if (absx < 0x33000000u) return uint16_t(sign);           // below half the smallest
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(absx >> 23);  // 14..24
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);   // round to nearest even
  return uint16_t(sign | (r >> 13));
}

TRIAD_HOST_DEVICE inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else {
    u = sign | (exp + 112) << 23 | mant << 13;
  }
  return detail::bits_to_float(u);
}

}  // namespace triad
