#include "zero/block_quantize.h"

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/ops.h"

namespace triad::zero {

namespace {

void check_host(const Tensor& t, const char* what) {
  TRIAD_CHECK(t.device().is_cpu() && t.is_contiguous(), "block quantization: " << what << " " << t.str()
                                                                                 << " must be contiguous on the host");
}

// The elements as f32: x itself, or a converted copy.
Tensor as_f32(const Tensor& x) { return x.dtype() == DType::f32 ? x : ops::to(x, DType::f32); }

int qmax(int bits) {
  TRIAD_CHECK(bits == 8 || bits == 4, "block quantization: bits must be 8 or 4, got " << bits);
  return bits == 8 ? 127 : 7;
}

int8_t element(const int8_t* q, int64_t i, int bits) {
  if (bits == 8) return q[i];
  const uint8_t byte = uint8_t(q[i / 2]);
  const int nibble = i % 2 == 0 ? byte & 0xf : byte >> 4;
  return int8_t(nibble >= 8 ? nibble - 16 : nibble);
}

// Dequantizes n elements into dst (f32) from q and scales.
void dequantize_into(const int8_t* q, const float* scales, int64_t n, int bits, int64_t block, float* dst, bool add) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < quantized_blocks(n, block); ++b) {
    const float s = scales[b];
    const int64_t end = std::min(n, (b + 1) * block);
    for (int64_t i = b * block; i < end; ++i) {
      const float v = float(element(q, i, bits)) * s;
      dst[i] = add ? dst[i] + v : v;
    }
  }
}

}  // namespace

void quantize_blocks(const Tensor& x, int bits, int64_t block, const Tensor& q, const Tensor& scales) {
  const int top = qmax(bits);
  check_host(x, "input");
  check_host(q, "output");
  check_host(scales, "scales");
  const int64_t n = x.numel(), blocks = quantized_blocks(n, block);
  TRIAD_CHECK(block >= 2 && q.dtype() == DType::i8 && q.numel() == quantized_bytes(n, bits) &&
                  scales.dtype() == DType::f32 && scales.numel() == blocks,
              "quantize_blocks: " << n << " elements in blocks of " << block << " need " << quantized_bytes(n, bits)
                                  << " i8 and " << blocks << " f32 scales, got " << q.str() << " and " << scales.str());
  const Tensor xf = as_f32(x);
  const float* v = xf.data<float>();
  int8_t* out = q.data<int8_t>();
  float* sc = scales.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, end = std::min(n, begin + block);
    float amax = 0;
    bool finite = true;
    for (int64_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(v[i]);
      amax = std::max(amax, std::fabs(v[i]));
    }
    const float s = finite ? amax / float(top) : std::numeric_limits<float>::quiet_NaN();
    sc[b] = s;
    const float inv = s > 0 && finite ? 1.0f / s : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      const int k = int(std::clamp(std::nearbyint(v[i] * inv), float(-top), float(top)));
      if (bits == 8) {
        out[i] = int8_t(k);
      } else {
        uint8_t& byte = reinterpret_cast<uint8_t&>(out[i / 2]);
        const uint8_t nib = uint8_t(k & 0xf);
        byte = i % 2 == 0 ? uint8_t((byte & 0xf0) | nib) : uint8_t((byte & 0x0f) | (nib << 4));
      }
    }
  }
  // An odd count leaves the last byte's high nibble unused: zero, so bytes are deterministic.
  if (bits == 4 && n % 2 == 1) reinterpret_cast<uint8_t&>(out[n / 2]) &= 0x0f;
}

void dequantize_blocks(const Tensor& q, const Tensor& scales, int bits, int64_t block, const Tensor& out) {
  qmax(bits);
  check_host(q, "input");
  check_host(scales, "scales");
  check_host(out, "output");
  const int64_t n = out.numel();
  TRIAD_CHECK(q.numel() == quantized_bytes(n, bits) && scales.numel() == quantized_blocks(n, block),
              "dequantize_blocks: " << q.str() << " and " << scales.str() << " do not hold " << n << " elements");
  Tensor dst = out.dtype() == DType::f32 ? out : Tensor::empty({n}, DType::f32);
  dequantize_into(q.data<int8_t>(), scales.data<float>(), n, bits, block, dst.data<float>(), false);
  if (!dst.is_same(out)) ops::copy_(out, dst);
}

void dequantize_sum(const Tensor& q, const Tensor& scales, int bits, int64_t block, int64_t k, const Tensor& out) {
  qmax(bits);
  check_host(q, "input");
  check_host(scales, "scales");
  check_host(out, "output");
  const int64_t n = out.numel(), qb = quantized_bytes(n, bits), nb = quantized_blocks(n, block);
  TRIAD_CHECK(out.dtype() == DType::f32 && q.numel() == k * qb && scales.numel() == k * nb,
              "dequantize_sum: " << k << " chunks of " << n << " elements in " << q.str() << " and " << scales.str());
  for (int64_t c = 0; c < k; ++c)
    dequantize_into(q.data<int8_t>() + c * qb, scales.data<float>() + c * nb, n, bits, block, out.data<float>(),
                    c > 0);
}

}  // namespace triad::zero
