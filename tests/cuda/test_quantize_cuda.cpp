// Block quantization (ops::quantize_blocks, dequantize_blocks, dequantize_reduce) on a GPU
// against the CPU backend: q and scales bit for bit (zero, vanishing and non-finite blocks
// among them), one slice dequantized bit for bit (NaN for NaN), sums of slices up to f32
// rounding; 8 and 4 bits, f32, bf16 and f16 sources. The quantized linear layers' GEMM
// (ops::quantized_linear) against the CPU's: bit for bit at 8 activation bits, within two
// orders of f32 sums at 16. Needs a GPU; without one the program reports itself skipped
// (gpu_test_main.h).
#define BOOST_TEST_MODULE quantize_cuda
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_GPU_TEST_MAIN's
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/gpu_test_main.h"
#include "cuda/quantize_source.h"
#include "nn/layers.h"
#include "support/check.h"
#include "tensor/ops.h"
#include "tensor/quantized_matmul.h"
#include "tensor/random.h"

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

// Every weight format the CPU packs, groups of 8, 64 and a whole row, GPT-2's projection
// shape and an odd one, 1, 16 and 37 tokens, f32 and bf16 tokens: the GPU's y equals the
// CPU's bit for bit at 8 activation bits; at 16 within 2 (k + 1) u sum |x w|.
BOOST_AUTO_TEST_CASE(quantized_linear_matches_the_cpu) {
  Generator g(23);
  struct Shape2 {
    int64_t n, k;
  };
  for (const Shape2 s : {Shape2{768, 768}, Shape2{70, 200}})
    for (int bits : {8, 4, 2, 1})
      for (bool symmetric : {true, false})
        for (int64_t group : {int64_t(8), int64_t(s.k == 768 ? 64 : 40), s.k}) {
          const QuantFormat f{bits, group, symmetric};
          Tensor w = Tensor::empty({s.n, s.k}), bias = Tensor::empty({s.n});
          ops::normal_(w, 0.0, 0.05, g);
          ops::uniform_(bias, -1.0, 1.0, g);
          const Quantized q = ops::quantize_blocks(w, f);
          const PackedWeight packed = ops::pack_weight(q, s.n, s.k, f);
          const PackedWeight on_gpu = ops::to(packed, Device::cuda());
          const Tensor bias_gpu = ops::to(bias, Device::cuda());
          for (int64_t m : {1, 16, 37})
            for (DType dtype : {DType::f32, DType::bf16}) {
              Tensor x = Tensor::empty({m, s.k});
              ops::normal_(x, 0.0, 1.0, g);
              x = ops::to(x, dtype);
              const std::string what = std::to_string(bits) + " bits" + (symmetric ? "" : " asymmetric") + ", group " +
                                       std::to_string(group) + ", W(" + std::to_string(s.n) + ", " +
                                       std::to_string(s.k) + "), m " + std::to_string(m) + ", " + dtype_name(dtype);
              const Tensor want = ops::quantized_linear(x, packed, bias, 8);
              const Tensor got = ops::quantized_linear(ops::to(x, Device::cuda()), on_gpu, bias_gpu, 8);
              BOOST_TEST(got.device().is_cuda());
              BOOST_TEST(same_bytes(got, want), what);
              if (dtype == DType::bf16) continue;  // the 16-bit path with f32 tokens
              const std::vector<float> a =
                  ops::to(ops::quantized_linear(ops::to(x, Device::cuda()), on_gpu, bias_gpu, 16), Device::cpu())
                      .to_vector<float>();
              const std::vector<float> b = ops::quantized_linear(x, packed, bias, 16).to_vector<float>();
              Tensor w_dq = Tensor::empty({s.n, s.k});
              ops::dequantize_blocks(q, w_dq, f);
              const std::vector<float> xv = x.to_vector<float>(), wv = w_dq.to_vector<float>(),
                                       bv = bias.to_vector<float>();
              int64_t wrong = 0;
              for (int64_t r = 0; r < m; ++r)
                for (int64_t c = 0; c < s.n; ++c) {
                  double mag = std::fabs(bv[size_t(c)]);
                  for (int64_t i = 0; i < s.k; ++i)
                    mag += std::fabs(double(xv[size_t(r * s.k + i)]) * wv[size_t(c * s.k + i)]);
                  const size_t at = size_t(r * s.n + c);
                  wrong += !(std::fabs(double(a[at]) - b[at]) <= 2.0 * double(s.k + 1) * 0x1p-24 * mag);
                }
              BOOST_TEST(wrong == 0, what << " A16: " << wrong << " outputs beyond the bound");
            }
        }
}

// Module::to moves a quantized layer's packed weight with its bias (nn::Linear::move_state):
// its forward then runs on the GPU, with the CPU's values, and moves back.
BOOST_AUTO_TEST_CASE(a_quantized_layer_moves_with_its_module) {
  Generator g(29);
  nn::Linear layer(64, 40, true, nn::Linear::WithoutWeight{});
  ops::uniform_(layer.bias, -1.0, 1.0, g);
  Tensor w = Tensor::empty({40, 64}), x = Tensor::empty({5, 64});
  ops::normal_(w, 0.0, 0.1, g);
  ops::normal_(x, 0.0, 1.0, g);
  const QuantFormat f{4, 32};
  layer.use_quantized(std::make_shared<const PackedWeight>(ops::pack_weight(ops::quantize_blocks(w, f), 40, 64, f)), 8);
  const Tensor want = layer.forward(x);
  layer.to(Device::cuda());
  BOOST_TEST(layer.quantized()->data.device().is_cuda());
  BOOST_TEST(layer.quantized()->scales.device().is_cuda());
  const Tensor got = layer.forward(ops::to(x, Device::cuda()));
  BOOST_TEST(got.device().is_cuda());
  BOOST_TEST(same_bytes(got, want));
  layer.to(Device::cpu());
  BOOST_TEST(layer.quantized()->data.device().is_cpu());
  BOOST_TEST(same_bytes(layer.forward(x), want));
}

// Module::to moves a quantized token table's packed weight (nn::Embedding::move_state): its
// lookup (ops::packed_rows) then runs on the GPU with the CPU's rows bit for bit, for every
// symmetric width; a bad index gives a zero row and an error at the next wait.
BOOST_AUTO_TEST_CASE(a_quantized_table_moves_with_its_module) {
  Generator g(31);
  Tensor w = Tensor::empty({70, 96});
  ops::normal_(w, 0.0, 0.1, g);
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{69, 0, 33, 17, 33, 48}, {2, 3});
  for (int bits : {8, 4, 2, 1}) {
    const QuantFormat f{bits, 32};
    nn::Embedding table(70, 96, nn::WithoutWeight{});
    table.use_quantized(std::make_shared<const PackedWeight>(ops::pack_weight(ops::quantize_blocks(w, f), 70, 96, f)),
                        8);
    const Tensor want = table(idx);
    table.to(Device::cuda());
    BOOST_TEST(table.quantized()->data.device().is_cuda());
    BOOST_TEST(same_bytes(table(ops::to(idx, Device::cuda())), want), bits << " bits");
    if (bits != 8) continue;
    const Tensor bad = ops::to(Tensor::from_vector(std::vector<int64_t>{3, 70}, {2}), Device::cuda());
    const Tensor rows = table(bad);
    test::check_error([&] { ops::to(rows, Device::cpu()); }, {"embedding", "index 70", "position 1", "[0, 70)"});
    BOOST_TEST(ops::max_abs(ops::select(ops::to(rows, Device::cpu()), 0, 1)) == 0.0);
  }
}
