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

bool is_16bit(DType t) { return t == DType::bf16 || t == DType::f16; }

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i8})
    if (name == dtype_name(t)) return t;
  throw Error("unknown dtype '" + name + "' (expected f32, f64, bf16, f16, i64, i32 or i8)");
}

}  // namespace triad
