// The CUDA backend's block quantization kernels (cuda/backend/quantize_kernels.cuh) run on
// the CPU under an emulation of CUDA (cuda/cuda_emulation.h), against the CPU backend:
// q and scales bit for bit (zero, vanishing and non-finite blocks among them), a single
// slice dequantized bit for bit, sums of slices up to f32 rounding. Grids smaller than the
// work make every grid-stride loop take several turns. Their speed needs a GPU.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/quantize_kernels.cuh"
#include "cuda/quantize_source.h"
#include "tensor/ops.h"

using namespace triad;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

template <int Bits, class Load>
Quantized quantize_emulated(const Tensor& src, int64_t block) {
  const int64_t rows = src.size(0), n = src.size(1);
  const QuantFormat f{Bits, block};
  Quantized r{Tensor::full({rows, f.bytes(n)}, 99, DType::i8), Tensor::full({rows, f.blocks(n)}, 99.0)};
  emulation::launch(3, 1, 64, [&] {
    cuda::quantize_kernel<Bits>(static_cast<const typename Load::type*>(src.raw_data()), r.q.data<int8_t>(),
                                r.scales.data<float>(), cuda::QuantGeometry<Bits>{rows, n, block}, Load{});
  });
  return r;
}

template <int Bits, class Store>
void dequantize_emulated(const Quantized& r, const Tensor& out, int64_t k, int64_t block) {
  const int64_t rows = out.size(0), n = out.size(1);
  emulation::launch(2, 1, 64, [&] {
    cuda::dequantize_kernel<Bits>(r.q.data<int8_t>(), r.scales.data<float>(),
                                  static_cast<typename Store::type*>(out.raw_data()),
                                  cuda::QuantGeometry<Bits>{rows, n, block}, k, Store{});
  });
}

template <int Bits, class Load, class Store>
void check_format(DType dtype) {
  const int64_t block = 64, rows = 6, n = 5 * 64 + 13;  // odd: a half byte at 4 bits
  const QuantFormat f{Bits, block};
  const std::string what = std::to_string(Bits) + " bits, " + dtype_name(dtype);
  const Tensor src = test::quantize_source(rows, n, dtype);
  const Quantized want = ops::quantize_blocks(src, f);
  const Quantized got = quantize_emulated<Bits, Load>(src, block);
  BOOST_TEST(same_bytes(got.q, want.q), what << ": q");
  BOOST_TEST(same_bytes(got.scales, want.scales), what << ": scales");

  // k = 1: every row on its own, exactly the CPU's values (in the output dtype).
  Tensor out = Tensor::empty({rows, n}, dtype), cpu_out = Tensor::empty({rows, n}, dtype);
  dequantize_emulated<Bits, Store>(want, out, 1, block);
  ops::dequantize_blocks(want.q, want.scales, cpu_out, f);
  BOOST_TEST(same_bytes(out, cpu_out), what << ": dequantized");

  // k = 3: rows (0, 1, 2) and (3, 4, 5) summed, in f32; rows 1..5 hold no special blocks.
  Tensor sums = Tensor::empty({2, n}), cpu_sum = Tensor::empty({n});
  dequantize_emulated<Bits, cuda::StoreF32>(want, sums, 3, block);
  ops::dequantize_reduce(ops::narrow(want.q, 0, 3, 3), ops::narrow(want.scales, 0, 3, 3), cpu_sum, f);
  const Tensor diff = ops::sub(ops::select(sums, 0, 1), cpu_sum);
  BOOST_TEST(ops::max_abs(diff) <= 6.0 * 0x1p-20, what << ": sum of 3 slices");  // a few units of 6's last place
  const std::vector<float> first = ops::select(sums, 0, 0).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) BOOST_TEST(std::isnan(first[i]) == (i / 64 == 2 || i / 64 == 3), what << " " << i);
}

template <class Load, class Store>
void check_both(DType dtype) {
  check_format<8, Load, Store>(dtype);
  check_format<4, Load, Store>(dtype);
}

}  // namespace

BOOST_AUTO_TEST_CASE(quantize_f32_matches_the_cpu) { check_both<cuda::LoadF32, cuda::StoreF32>(DType::f32); }
BOOST_AUTO_TEST_CASE(quantize_bf16_matches_the_cpu) { check_both<cuda::LoadBf16, cuda::StoreBf16>(DType::bf16); }
BOOST_AUTO_TEST_CASE(quantize_f16_matches_the_cpu) { check_both<cuda::LoadF16, cuda::StoreF16>(DType::f16); }
