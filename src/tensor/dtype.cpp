#include "tensor/dtype.h"

#include "tensor/error.h"

namespace triad {

size_t element_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i8:
      return 1;
  }
  TRIAD_ASSERT(false);
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
    case DType::i8:
      return "i8";
  }
  return "?";
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i8})
    if (name == dtype_name(t)) return t;
  throw Error("unknown dtype '" + name + "' (expected f32, f64, bf16, f16, i64, i32 or i8)");
}

uint16_t f16::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
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

float f16::to_float(uint16_t h) {
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
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace triad
