// Block-wise quantization kernels (ops::quantize_blocks, dequantize_blocks,
// dequantize_reduce). The symmetric 8- and 4-bit formats (ZeRO++'s, on every backend) have
// vectorized kernels; the compression formats (2 and 1 bits, asymmetric) one generic
// field-at-a-time kernel, run once per weight when a model is quantized. Memory-bound: OpenMP spreads the blocks over
// threads and each block's loops are written for the vectorizer (no branches per element, one integer max). Quantizing
// reads a block twice, for its scale and for its values; at the default block (16 KB of f32) the second read hits L1,
// so the source crosses the memory bus once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided.h"

namespace triad {

namespace {

inline float load(float v) { return v; }
inline float load(bf16 v) { return float(v); }
inline float load(f16 v) { return float(v); }

template <class T>
T store(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return T(v);
}

// The bits of |x|. As unsigned integers they order as the magnitudes do, with infinity
// (kInfBits) above every finite value and NaN above infinity: one integer max over a block
// gives both its largest magnitude and whether it holds a non-finite value.
inline uint32_t abs_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u & 0x7fffffffu;
}
constexpr uint32_t kInfBits = 0x7f800000u;
constexpr uint32_t kFlushBits = uint32_t(127 - 119) << 23;  // 2^-119: below, max/qmax is not a normal f32

struct BlockScale {
  float scale;
  float inv;  // x inv is x in units of scale; 0: every q of the block is 0
};

BlockScale block_scale(uint32_t max_bits, int qmax) {
  if (max_bits >= kInfBits) return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
  if (max_bits < kFlushBits) return {0.0f, 0.0f};
  float m;
  std::memcpy(&m, &max_bits, 4);
  return {m / float(qmax), float(qmax) / m};
}

template <class T>
uint32_t max_abs_bits(const T* x, int64_t len) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < len; ++i) m = std::max(m, abs_bits(load(x[i])));
  return m;
}

// x in units of the scale, rounded to nearest even (the default rounding mode), clamped.
inline int quantize_one(float x, float inv, float qmax) {
  const float v = std::nearbyint(x * inv);
  return int(v < -qmax ? -qmax : (v > qmax ? qmax : v));
}

template <int Bits, class T>
void quantize_block(const T* x, int8_t* q, int64_t len, float inv, float qmax) {
  if constexpr (Bits == 8) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) q[i] = int8_t(quantize_one(load(x[i]), inv, qmax));
  } else {
    // Low nibble: element 2i; high nibble: element 2i+1 (hi * 16 keeps its sign in bits 4-7).
#pragma omp simd
    for (int64_t i = 0; i < len / 2; ++i)
      q[i] = int8_t((quantize_one(load(x[2 * i]), inv, qmax) & 15) | quantize_one(load(x[2 * i + 1]), inv, qmax) * 16);
    if (len % 2) q[len / 2] = int8_t(quantize_one(load(x[len - 1]), inv, qmax) & 15);
  }
}

template <int Bits, class T>
void quantize_rows(const T* src, int8_t* q, float* scales, int64_t rows, int64_t n, const QuantFormat& f) {
  const int64_t per_row = f.blocks(n), row_bytes = f.bytes(n), total = rows * per_row;
  const int qmax = f.qmax();
#pragma omp parallel for schedule(static) if (rows * n > cpu::kParallelGrain)
  for (int64_t t = 0; t < total; ++t) {
    const int64_t r = t / per_row, begin = (t % per_row) * f.block, len = std::min(f.block, n - begin);
    const T* x = src + r * n + begin;
    int8_t* qb = q + r * row_bytes + begin * Bits / 8;  // begin is even at 4 bits
    const BlockScale s = block_scale(max_abs_bits(x, len), qmax);
    scales[t] = s.scale;
    if (s.inv == 0.0f)
      std::memset(qb, 0, size_t(f.bytes(len)));
    else
      quantize_block<Bits>(x, qb, len, s.inv, float(qmax));
  }
}

// A block is summed a chunk at a time in an L1-resident f32 buffer of kChunk values. At 4
// bits the buffer holds a chunk's even elements in its first half and its odd ones in the
// second: each slice then adds contiguous runs, and the elements interleave once, on the
// way out.
constexpr int64_t kChunk = 1024;  // even: chunks of a 4-bit block start on a byte

// acc (+)= the len values of q dequantized with scale s (= for the first slice, += after).
template <int Bits, bool Add>
void dequantize_into(const int8_t* q, float s, float* acc, int64_t len) {
  if constexpr (Bits == 8) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) acc[i] = (Add ? acc[i] : 0.0f) + float(q[i]) * s;
  } else {
    float *even = acc, *odd = acc + kChunk / 2;
    // An odd len's last high nibble is padding: decoded into odd[], never written out.
#pragma omp simd
    for (int64_t i = 0; i < (len + 1) / 2; ++i) {
      const int b = q[i];
      even[i] = (Add ? even[i] : 0.0f) + float(((b & 15) ^ 8) - 8) * s;  // low nibble, sign-extended
      odd[i] = (Add ? odd[i] : 0.0f) + float(b >> 4) * s;
    }
  }
}

template <int Bits, class T>
void write_chunk(const float* acc, T* o, int64_t len) {
  if constexpr (Bits == 8) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) o[i] = store<T>(acc[i]);
  } else {
    const float *even = acc, *odd = acc + kChunk / 2;
#pragma omp simd
    for (int64_t i = 0; i < len / 2; ++i) {
      o[2 * i] = store<T>(even[i]);
      o[2 * i + 1] = store<T>(odd[i]);
    }
    if (len % 2) o[len - 1] = store<T>(even[len / 2]);
  }
}

// Output row r = the sum of input rows r k .. r k + k - 1, chunk by chunk, written once in
// the output's type.
template <int Bits, class T>
void dequantize_rows(const int8_t* q, const float* scales, T* out, int64_t rows, int64_t k, int64_t n,
                     const QuantFormat& f) {
  const int64_t per_row = f.blocks(n), row_bytes = f.bytes(n), total = rows * per_row;
#pragma omp parallel for schedule(static) if (rows * k * n > cpu::kParallelGrain)
  for (int64_t t = 0; t < total; ++t) {
    const int64_t r = t / per_row, b = t % per_row, begin = b * f.block, len = std::min(f.block, n - begin);
    for (int64_t c = 0; c < len; c += kChunk) {
      const int64_t m = std::min(kChunk, len - c);
      alignas(64) float acc[kChunk];
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = r * k + j;
        const int8_t* qc = q + row * row_bytes + (begin + c) * Bits / 8;
        const float s = scales[row * per_row + b];
        if (j == 0)
          dequantize_into<Bits, false>(qc, s, acc, m);
        else
          dequantize_into<Bits, true>(qc, s, acc, m);
      }
      write_chunk<Bits>(acc, out + r * n + begin + c, m);
    }
  }
}

// f(T{}, bits) for the storage type T of a quantizable dtype (f32, bf16, f16) and the
// format's bits as a compile-time constant.
template <class F>
void visit_quantized(DType t, int bits, F&& f) {
  auto with_type = [&](auto bits_tag) {
    switch (t) {
      case DType::bf16:
        return f(bf16{}, bits_tag);
      case DType::f16:
        return f(f16{}, bits_tag);
      default:
        return f(float{}, bits_tag);
    }
  };
  if (bits == 8)
    with_type(std::integral_constant<int, 8>{});
  else
    with_type(std::integral_constant<int, 4>{});
}

}  // namespace

void CpuBackend::quantize_blocks(const Tensor& src, const Tensor& q, const Tensor& scales, int64_t rows, int64_t n,
                                 const QuantFormat& format) {
  visit_quantized(src.dtype(), format.bits, [&](auto tag, auto bits) {
    quantize_rows<decltype(bits)::value>(src.data<decltype(tag)>(), q.data<int8_t>(), scales.data<float>(), rows, n,
                                         format);
  });
}

void CpuBackend::dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& out, int64_t rows, int64_t k,
                                   int64_t n, const QuantFormat& format) {
  visit_quantized(out.dtype(), format.bits, [&](auto tag, auto bits) {
    dequantize_rows<decltype(bits)::value>(q.data<int8_t>(), scales.data<float>(), out.data<decltype(tag)>(), rows, k,
                                           n, format);
  });
}

namespace {

inline void write_field(int8_t* row, int bits, int64_t i, int v) {
  const int64_t bit = i * bits;
  row[bit / 8] = int8_t(uint8_t(row[bit / 8]) | ((v & ((1 << bits) - 1)) << (bit % 8)));
}

// One block of len values at x into fields begin .. begin + len of the row qr.
template <class T>
void quantize_generic_block(const T* x, int8_t* qr, int64_t begin, int64_t len, const QuantFormat& f, float& scale,
                            float& offset) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  double abs_sum = 0;
  bool finite = true;
  for (int64_t i = 0; i < len; ++i) {
    const float v = load(x[i]);
    finite = finite && std::isfinite(v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    abs_sum += std::fabs(v);
  }
  offset = 0;
  if (!finite) {  // q 0 (binary: the 0 field), scale NaN: every value comes back NaN
    scale = offset = std::numeric_limits<float>::quiet_NaN();
    if (f.symmetric) offset = 0;
    return;
  }
  if (f.symmetric && f.bits == 1) {
    scale = float(abs_sum / double(len));
    if (scale < 0x1p-119f) scale = 0;
    for (int64_t i = 0; i < len; ++i) write_field(qr, 1, begin + i, scale != 0 && load(x[i]) >= 0);
    return;
  }
  if (f.symmetric && f.bits == 2) {  // ternary weight networks: threshold 0.7 mean |x|
    const float threshold = float(0.7 * abs_sum / double(len));
    double above_sum = 0;
    int64_t above = 0;
    for (int64_t i = 0; i < len; ++i)
      if (std::fabs(load(x[i])) > threshold) above_sum += std::fabs(load(x[i])), ++above;
    scale = above > 0 ? float(above_sum / double(above)) : 0.0f;
    if (scale < 0x1p-119f) scale = 0;
    if (scale != 0)
      for (int64_t i = 0; i < len; ++i) {
        const float v = load(x[i]);
        if (std::fabs(v) > threshold) write_field(qr, 2, begin + i, v > 0 ? 1 : -1);
      }
    return;
  }
  if (f.symmetric) {
    const float m = std::max(-lo, hi);
    const BlockScale s = block_scale(abs_bits(m), f.qmax());
    scale = s.scale;
    if (s.inv != 0)
      for (int64_t i = 0; i < len; ++i)
        write_field(qr, f.bits, begin + i, quantize_one(load(x[i]), s.inv, float(f.qmax())));
    return;
  }
  const int levels = (1 << f.bits) - 1, half = 1 << (f.bits - 1);
  const float range = hi - lo;
  const bool flat = !(range >= 0x1p-119f) || !std::isfinite(range);  // equal values, or a range f32 cannot hold
  scale = flat ? 0.0f : range / float(levels);
  offset = flat ? lo : lo + float(half) * scale;
  const float inv = flat ? 0.0f : float(levels) / range;
  for (int64_t i = 0; i < len; ++i) {
    const float u = flat ? 0.0f : std::nearbyint((load(x[i]) - lo) * inv);
    write_field(qr, f.bits, begin + i, int(std::clamp(u, 0.0f, float(levels))) - half);
  }
}

}  // namespace

void cpu_quantize_blocks(const Tensor& src, const Tensor& q, const Tensor& scales, const Tensor& offsets, int64_t rows,
                         int64_t n, const QuantFormat& format) {
  const int64_t per_row = format.blocks(n), row_bytes = format.bytes(n), total = rows * per_row;
  std::memset(q.data<int8_t>(), 0, size_t(rows * row_bytes));
  int8_t* qp = q.data<int8_t>();
  float* sp = scales.data<float>();
  float* op = offsets.defined() ? offsets.data<float>() : nullptr;
  visit_quantized(src.dtype(), 8, [&](auto tag, auto) {
    using T = decltype(tag);
    const T* x = src.data<T>();
#pragma omp parallel for schedule(static) if (rows * n > cpu::kParallelGrain)
    for (int64_t t = 0; t < total; ++t) {
      const int64_t r = t / per_row, begin = (t % per_row) * format.block, len = std::min(format.block, n - begin);
      float offset;
      quantize_generic_block(x + r * n + begin, qp + r * row_bytes, begin, len, format, sp[t], offset);
      if (op) op[t] = offset;
    }
  });
}

void cpu_dequantize_blocks(const Tensor& q, const Tensor& scales, const Tensor& offsets, const Tensor& out,
                           int64_t rows, int64_t k, int64_t n, const QuantFormat& format) {
  const int64_t per_row = format.blocks(n), row_bytes = format.bytes(n);
  const int8_t* qp = q.data<int8_t>();
  const float* sp = scales.data<float>();
  const float* op = offsets.defined() ? offsets.data<float>() : nullptr;
  const bool binary = format.symmetric && format.bits == 1;
  visit_quantized(out.dtype(), 8, [&](auto tag, auto) {
    using T = decltype(tag);
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (rows * k * n > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        float acc = 0;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t row = r * k + j, b = row * per_row + i / format.block;
          acc += float(quant_field(qp + row * row_bytes, format.bits, binary, i)) * sp[b] + (op ? op[b] : 0.0f);
        }
        o[r * n + i] = store<T>(acc);
      }
  });
}

}  // namespace triad
