// Element types. f32 and f64 are compute types on the CPU (f64 exists for gradient checks);
// bf16 and f16 are storage types converted on load/store; i64/i32 carry indices; i8 holds
// quantized data. The numeric codes are part of the on-disk tensor format (io/tensor_file).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "tensor/float16.h"

namespace triad {

enum class DType : uint8_t { f32 = 0, f64 = 1, bf16 = 2, f16 = 3, i64 = 4, i32 = 5, i8 = 6 };

size_t element_size(DType t);
const char* dtype_name(DType t);
bool is_floating(DType t);
bool is_16bit(DType t);  // bf16 or f16
DType dtype_from_name(const std::string& name);  // "f32", "bf16", ... ; throws Error

// bfloat16: the upper half of an IEEE float. Conversion rounds to nearest even; NaN stays NaN
// (tensor/float16.h).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return bf16_to_float(bits); }
  static uint16_t from_float(float f) { return float_to_bf16(f); }
};

// IEEE binary16. Conversion rounds to nearest even, handles subnormals, inf and NaN
// (tensor/float16.h).
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) { return float_to_f16(f); }
  static float to_float(uint16_t h) { return f16_to_float(h); }
};

// Any element type as double (bf16/f16 through float).
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return double(float(v));
  else
    return double(v);
}
// A double as any element type (bf16/f16 through float, rounding to nearest even).
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return T(float(v));
  else
    return T(v);
}

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::i8;
};

// Calls f(T{}) with T the C++ type of dtype t.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::bf16:
      return f(bf16{});
    case DType::f16:
      return f(f16{});
    case DType::i64:
      return f(int64_t{});
    case DType::i32:
      return f(int32_t{});
    case DType::i8:
      return f(int8_t{});
  }
  return f(float{});
}

}  // namespace triad
