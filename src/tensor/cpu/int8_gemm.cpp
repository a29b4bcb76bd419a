// ops::quantized_linear on the CPU (CpuBackend::quantized_linear): the tokens' integers
// offered to the integer kernel chosen (tensor/cpu/int8_gemm_kernels.h), the portable kernel,
// the A16 path (the weight widened a tile at a time), the weight's packing and the lookup of
// its rows (ops::packed_rows). The GPU's kernel computes the same sums (Note [Integer GEMM on
// the GPU] in cuda/backend/quantized_linear_kernels.cuh).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/int8_gemm_kernels.h"

namespace triad {

using int8_gemm::kTile;
using int8_gemm::run_at;
using int8_gemm::run_value;

namespace int8_gemm {

// One token and one 16-column tile at a time, the sums in the order of the other kernels.
void portable(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
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

}  // namespace int8_gemm

bool cpu_has_int8_kernel(Int8Kernel kernel) {
  switch (kernel) {
    case Int8Kernel::avx512_vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case Int8Kernel::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Int8Kernel::best:
    case Int8Kernel::portable:
      return true;
  }
  return false;
}

Int8Kernel cpu_best_int8_kernel() {
  static const Int8Kernel best = cpu_has_int8_kernel(Int8Kernel::avx512_vnni) ? Int8Kernel::avx512_vnni
                                 : cpu_has_int8_kernel(Int8Kernel::avx2)      ? Int8Kernel::avx2
                                                                              : Int8Kernel::portable;
  return best;
}

void cpu_int8_gemm(const uint8_t* a, const float* a_scales, const int32_t* a_sums, int64_t m, const PackedWeight& w,
                   const float* bias, float* y, Int8Kernel kernel) {
  if (kernel == Int8Kernel::best) kernel = cpu_best_int8_kernel();
  TRIAD_CHECK(cpu_has_int8_kernel(kernel),
              "quantized_linear: this CPU cannot run the " << int8_kernel_name(kernel) << " integer kernel");
  const int8_gemm::Kernel run = kernel == Int8Kernel::avx512_vnni ? int8_gemm::avx512_vnni
                                : kernel == Int8Kernel::avx2      ? int8_gemm::avx2
                                                                  : int8_gemm::portable;
  run(a, a_scales, a_sums, m, w, bias, y);
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
  cpu_int8_gemm(up, a_scales.data<float>(), sp, m, w, bp, y.data<float>(), kernel);
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

void CpuBackend::packed_rows(const PackedWeight& w, const Tensor& indices, const Tensor& out) {
  const int64_t m = indices.numel(), k = w.k, group = w.format.block, np = w.padded_n();
  const int64_t* idx = indices.data<int64_t>();
  const float* scales = w.scales.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (m * k > (1 << 15))
  for (int64_t r = 0; r < m; ++r) {
    const int64_t row = idx[r], tile = row / kTile, c = row % kTile;
    for (int64_t in = 0; in < k; ++in) {
      const int v = run_value(run_at(w, tile, in / 4), w.format.bits, int(c * 4 + in % 4));
      o[r * k + in] = 0.0f + float(v) * scales[(in / group) * np + row];  // as dequantize_blocks: -0 becomes +0
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
