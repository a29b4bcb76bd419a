// Block quantization (ops::quantize_blocks, dequantize_blocks, dequantize_reduce) on a GPU
// against the CPU backend: q and scales bit for bit (zero, vanishing and non-finite blocks
// among them), one slice dequantized bit for bit (NaN for NaN), sums of slices up to f32 rounding; 8 and 4
// bits, f32, bf16 and f16 sources. Needs a GPU; without one the program reports itself
// skipped (gpu_test_main.h).
#define BOOST_TEST_MODULE quantize_cuda
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_GPU_TEST_MAIN's
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/gpu_test_main.h"
#include "cuda/quantize_source.h"
#include "tensor/ops.h"

TRIAD_GPU_TEST_MAIN()

using namespace triad;

namespace {

// q and scales: the same bytes.
bool same_bytes(const Tensor& gpu, const Tensor& cpu) {
  const Tensor a = ops::to(gpu, Device::cpu());
  return a.nbytes() == cpu.nbytes() && std::memcmp(a.raw_data(), cpu.raw_data(), a.nbytes()) == 0;
}

// Values: the same bits, except that a NaN matches any NaN (the GPU makes the canonical NaN
// where x86 keeps an operand's payload). Reports the first difference.
bool same_values(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  const std::vector<float> a = ops::to(ops::to(gpu, Device::cpu()), DType::f32).to_vector<float>();
  const std::vector<float> b = ops::to(cpu, DType::f32).to_vector<float>();
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isnan(a[i]) ? std::isnan(b[i]) : std::memcmp(&a[i], &b[i], sizeof(float)) == 0;
    if (!same) {
      BOOST_ERROR(what << ": element " << i << " is " << a[i] << " on the GPU, " << b[i] << " on the CPU");
      return false;
    }
  }
  return true;
}

void check_format(int bits, DType dtype) {
  const int64_t block = 64, rows = 6, n = 5 * 64 + 13;  // odd: a half byte at 4 bits
  const QuantFormat f{bits, block};
  const std::string what = std::to_string(bits) + " bits, " + dtype_name(dtype);
  const Tensor src = test::quantize_source(rows, n, dtype);
  const Quantized want = ops::quantize_blocks(src, f);
  const Quantized got = ops::quantize_blocks(ops::to(src, Device::cuda()), f);
  BOOST_TEST(got.q.device().is_cuda());
  BOOST_TEST(same_bytes(got.q, want.q), what << ": q");
  BOOST_TEST(same_bytes(got.scales, want.scales), what << ": scales");

  Tensor out = Tensor::empty({rows, n}, dtype, Device::cuda()), cpu_out = Tensor::empty({rows, n}, dtype);
  ops::dequantize_blocks(got.q, got.scales, out, f);
  ops::dequantize_blocks(want.q, want.scales, cpu_out, f);
  BOOST_TEST(same_values(out, cpu_out, what), what << ": dequantized");

  // Rows 3..5 summed in f32 (they hold no special blocks).
  Tensor sum = Tensor::empty({n}, DType::f32, Device::cuda()), cpu_sum = Tensor::empty({n});
  ops::dequantize_reduce(ops::narrow(got.q, 0, 3, 3), ops::narrow(got.scales, 0, 3, 3), sum, f);
  ops::dequantize_reduce(ops::narrow(want.q, 0, 3, 3), ops::narrow(want.scales, 0, 3, 3), cpu_sum, f);
  BOOST_TEST(ops::max_abs(ops::sub(ops::to(sum, Device::cpu()), cpu_sum)) <= 6.0 * 0x1p-20, what << ": sum of 3");
}

}  // namespace

BOOST_AUTO_TEST_CASE(f32_matches_the_cpu) {
  check_format(8, DType::f32);
  check_format(4, DType::f32);
}
BOOST_AUTO_TEST_CASE(bf16_matches_the_cpu) {
  check_format(8, DType::bf16);
  check_format(4, DType::bf16);
}
BOOST_AUTO_TEST_CASE(f16_matches_the_cpu) {
  check_format(8, DType::f16);
  check_format(4, DType::f16);
}
