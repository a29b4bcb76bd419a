// The CUDA backend's block quantization kernels (cuda/backend/quantize_kernels.cuh) run on
// the CPU under an emulation of CUDA (cuda/cuda_emulation.h), against the CPU backend:
// q and scales bit for bit (zero, vanishing and non-finite blocks among them), a single
// slice dequantized bit for bit, sums of slices up to f32 rounding. The quantized linear
// layers' kernels (cuda/backend/quantized_linear_kernels.cuh) likewise against
// ops::quantized_linear on the CPU: the integer GEMM bit for bit, the widened one within
// the bound of two orders of f32 sums; and the lookup of a packed weight's rows
// (ops::packed_rows) bit for bit. Grids smaller than the work make every grid-stride
// loop take several turns. Their speed needs a GPU.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/quantize_kernels.cuh"
#include "cuda/backend/quantized_linear_kernels.cuh"
#include "cuda/quantize_source.h"
#include "tensor/ops.h"
#include "tensor/quantized_matmul.h"
#include "tensor/random.h"

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

// ---- quantized linear layers ----

// The kernel's arguments for packed weight w, tokens a (their integers and scales, or x in
// f32), bias and y, all on the CPU.
cuda::QuantizedLinearArgs ql_args(const PackedWeight& w, const Quantized* tokens, const Tensor& x, const Tensor& bias,
                                  const Tensor& y) {
  cuda::QuantizedLinearArgs p;
  if (tokens) p.a = tokens->q.data<int8_t>(), p.a_scales = tokens->scales.data<float>();
  if (x.defined()) p.x = x.data<float>();
  p.w = w.data.data<int8_t>();
  p.scales = w.scales.data<float>();
  p.offsets = w.offsets.defined() ? w.offsets.data<float>() : nullptr;
  p.bias = bias.defined() ? bias.data<float>() : nullptr;
  p.y = y.data<float>();
  p.m = y.size(0), p.n = w.n, p.k = w.k, p.group = w.format.block;
  p.parts = cuda::ql_parts(w.k / w.format.block, w.format.block);
  return p;
}

// f(bool_constant four bits, bool_constant offsets) for w's format, as quantized_linear.cu.
template <class F>
void ql_visit(const PackedWeight& w, F&& f) {
  using T = std::true_type;
  using U = std::false_type;
  const bool four = w.format.bits == 4, offsets = w.offsets.defined();
  if (four && offsets) f(T{}, T{});
  if (four && !offsets) f(T{}, U{});
  if (!four && offsets) f(U{}, T{});
  if (!four && !offsets) f(U{}, U{});
}

// y of the integer kernel with R tokens a block (0: the tensor-core kernel), on a grid of
// `grid_y` token blocks.
template <int R>
Tensor ql_int8_emulated(const PackedWeight& w, const Quantized& tokens, const Tensor& bias, int64_t m,
                        unsigned grid_y) {
  Tensor y = Tensor::full({m, w.n}, 99.0);
  const cuda::QuantizedLinearArgs p = ql_args(w, &tokens, Tensor(), bias, y);
  ql_visit(w, [&](auto four, auto offsets) {
    constexpr bool kFour = decltype(four)::value, kOffsets = decltype(offsets)::value;
    if constexpr (R == 0)
      emulation::launch(unsigned(w.padded_n() / cuda::kQmCols), grid_y, cuda::kQmThreads,
                        [&] { cuda::int8_mma_linear_kernel<kFour, kOffsets>(p); });
    else
      emulation::launch(unsigned(w.padded_n() / cuda::kQlTileCols), grid_y, cuda::kQlThreads,
                        [&] { cuda::int8_linear_kernel<R, kFour, kOffsets>(p); });
  });
  return y;
}

}  // namespace

BOOST_AUTO_TEST_CASE(quantize_f32_matches_the_cpu) { check_both<cuda::LoadF32, cuda::StoreF32>(DType::f32); }
BOOST_AUTO_TEST_CASE(quantize_bf16_matches_the_cpu) { check_both<cuda::LoadBf16, cuda::StoreBf16>(DType::bf16); }
BOOST_AUTO_TEST_CASE(quantize_f16_matches_the_cpu) { check_both<cuda::LoadF16, cuda::StoreF16>(DType::f16); }

// Weights of every format the CPU packs times tokens (one of them all zeros, so its scale
// is 0), with and without a bias: the integer kernels give the CPU's y bit for bit, for
// every tokens-per-block the launcher picks, grids with fewer token blocks than the tokens
// need, one group a row (a group's quads summed by several threads) and more groups than a
// block holds at once (chunks), columns short of a tile; the tensor-core kernel where
// groups are whole 16-input steps (32, and a whole row of 96 or 512).
BOOST_AUTO_TEST_CASE(int8_linear_matches_the_cpu_bit_for_bit) {
  Generator g(17);
  struct Shape2 {
    int64_t n, k;
  };
  for (const Shape2 s : {Shape2{17, 96}, Shape2{70, 96}, Shape2{40, 512}})
    for (int bits : {8, 4, 2, 1})
      for (bool symmetric : {true, false})
        for (int64_t group : {int64_t(4), int64_t(8), int64_t(32), s.k}) {
          if (s.k == 512 && group != 4 && group != s.k) continue;  // 128 groups: two chunks
          if (group * bits % 8 != 0) continue;                     // 1 bit: groups of whole bytes
          const QuantFormat f{bits, group, symmetric};
          Tensor w = Tensor::empty({s.n, s.k}), bias = Tensor::empty({s.n});
          ops::uniform_(w, -0.5, 0.7, g);
          ops::uniform_(bias, -1.0, 1.0, g);
          const PackedWeight packed = ops::pack_weight(ops::quantize_blocks(w, f), s.n, s.k, f);
          for (int64_t m : {1, 2, 3, 9, 70}) {
            if (m == 70 && s.n != 70) continue;  // (emulated tensor-core steps are slow)
            Tensor x = Tensor::empty({m, s.k});
            ops::uniform_(x, -3.0, 2.0, g);
            if (m > 2) ops::fill_(ops::select(x, 0, 1), 0.0);
            const Quantized tokens = ops::quantize_blocks(x, QuantFormat{8, s.k});
            for (bool with_bias : {false, true}) {
              const Tensor b = with_bias ? bias : Tensor();
              const Tensor want = ops::quantized_linear(x, packed, b, 8, Int8Kernel::portable);
              const std::string what = std::to_string(bits) + " bits" + (symmetric ? "" : " asymmetric") + ", group " +
                                       std::to_string(group) + ", W(" + std::to_string(s.n) + ", " +
                                       std::to_string(s.k) + "), m " + std::to_string(m) + (with_bias ? ", bias" : "");
              for (Int8Kernel kernel : ops::cpu_int8_kernels())
                BOOST_TEST(same_bytes(want, ops::quantized_linear(x, packed, b, 8, kernel)),
                           what << ": " << int8_kernel_name(kernel));
              Tensor got;
              if (m == 1) got = ql_int8_emulated<1>(packed, tokens, b, m, 1);
              if (m == 2) got = ql_int8_emulated<2>(packed, tokens, b, m, 1);
              if (m == 3) got = ql_int8_emulated<4>(packed, tokens, b, m, 1);
              if (m == 9) got = ql_int8_emulated<8>(packed, tokens, b, m, 1);  // two turns of one token block
              if (got.defined()) BOOST_TEST(same_bytes(want, got), what);
              if (m == 9) BOOST_TEST(same_bytes(want, ql_int8_emulated<4>(packed, tokens, b, m, 2)), what << ", R 4");
              // On tensor cores where groups are whole 16-input steps: 9 tokens, and 70 in two
              // turns of one 64-token block (the second mostly past m).
              if (m >= 9 && cuda::ql_mma_fits(group))
                BOOST_TEST(same_bytes(want, ql_int8_emulated<0>(packed, tokens, b, m, 1)), what << ", tensor cores");
            }
          }
        }
}

// The lookup of a packed weight's rows (ops::packed_rows, a quantized token table's) against
// the CPU's, bit for bit, for every symmetric format and groups of 8 and of a whole row, rows
// in every tile (the last padded), on a grid smaller than the work; a bad index gives a zero
// row and is recorded once, for the next wait (Note [Deferred device errors]).
BOOST_AUTO_TEST_CASE(packed_rows_match_the_cpu_bit_for_bit) {
  Generator g(23);
  const int64_t n = 70, k = 96;
  Tensor w = Tensor::empty({n, k});
  ops::uniform_(w, -0.5, 0.7, g);
  ops::fill_(ops::narrow(ops::select(w, 0, 33), 0, 0, 8), 0.0);  // a zero block: +0 back
  const std::vector<int64_t> ids{69, 0, 33, 17, 33, 48, 15, 64};
  for (int bits : {8, 4, 2, 1})
    for (int64_t group : {int64_t(8), k}) {
      const QuantFormat f{bits, group};
      const PackedWeight packed = ops::pack_weight(ops::quantize_blocks(w, f), n, k, f);
      const Tensor idx = Tensor::from_vector(ids, {int64_t(ids.size())});
      const Tensor want = ops::packed_rows(packed, idx);
      std::vector<int64_t> bad = ids;
      bad[3] = n;  // the row after the last: a zero row, recorded
      cuda::BadIndexRecord record{};
      unsigned claimed = 0;
      const cuda::BadIndexSink sink{&claimed, &record};
      Tensor got = Tensor::full({int64_t(ids.size()), k}, 99.0);
      const auto run = [&](const std::vector<int64_t>& rows) {
        const auto kernel = bits == 4 ? cuda::packed_rows_kernel<true> : cuda::packed_rows_kernel<false>;
        emulation::launch(3, 1, 64, [&] {
          kernel(packed.data.data<int8_t>(), packed.scales.data<float>(), rows.data(), got.data<float>(),
                 int64_t(rows.size()), n, k, group, sink);
        });
      };
      const std::string what = std::to_string(bits) + " bits, group " + std::to_string(group);
      run(ids);
      BOOST_TEST(same_bytes(got, want), what);
      BOOST_TEST(record.found == 0, what);
      run(bad);
      BOOST_TEST(ops::max_abs(ops::select(got, 0, 3)) == 0.0, what << ": the bad index's row");
      BOOST_TEST(same_bytes(ops::narrow(got, 0, 4, 4), ops::narrow(want, 0, 4, 4)), what);
      BOOST_TEST_REQUIRE(record.found == 1, what << ": the bad index is not recorded");
      BOOST_TEST(record.op == int(cuda::IndexOp::embedding));
      BOOST_TEST(record.value == n);
      BOOST_TEST(record.position == 3);
      BOOST_TEST(record.count == int64_t(ids.size()));
      BOOST_TEST(record.limit == n);
    }
}

// The widened kernel (16-bit activations) against the CPU's: both sum k products of the same
// widened weights in f32, in different orders, so each is within k u sum |x w| of the exact
// sum (u = 2^-24) and they are within twice that of each other.
BOOST_AUTO_TEST_CASE(widened_linear_matches_the_cpu_within_f32_rounding) {
  Generator g(19);
  const int64_t n = 70, k = 96, m = 19;
  for (int bits : {8, 4, 2})
    for (bool symmetric : {true, false})
      for (int64_t group : {8, 96}) {
        const QuantFormat f{bits, group, symmetric};
        Tensor w = Tensor::empty({n, k}), x = Tensor::empty({m, k}), bias = Tensor::empty({n});
        ops::uniform_(w, -0.5, 0.7, g);
        ops::uniform_(x, -3.0, 2.0, g);
        ops::uniform_(bias, -1.0, 1.0, g);
        const Quantized q = ops::quantize_blocks(w, f);
        const PackedWeight packed = ops::pack_weight(q, n, k, f);
        Tensor w_dq = Tensor::empty({n, k});
        ops::dequantize_blocks(q, w_dq, f);
        const std::vector<float> want = ops::quantized_linear(x, packed, bias, 16).to_vector<float>();
        Tensor got = Tensor::full({m, n}, 99.0);
        const cuda::QuantizedLinearArgs p = ql_args(packed, nullptr, x, bias, got);
        ql_visit(packed, [&](auto four, auto offsets) {
          emulation::launch(unsigned(packed.padded_n() / cuda::kQlTileCols), 1, cuda::kQlThreads,
                            [&] { cuda::widened_linear_kernel<decltype(four)::value, decltype(offsets)::value>(p); });
        });
        const std::vector<float> xv = x.to_vector<float>(), wv = w_dq.to_vector<float>(), bv = bias.to_vector<float>(),
                                 gv = got.to_vector<float>();
        int64_t wrong = 0;
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = 0; c < n; ++c) {
            double mag = std::fabs(bv[size_t(c)]);
            for (int64_t i = 0; i < k; ++i) mag += std::fabs(double(xv[size_t(r * k + i)]) * wv[size_t(c * k + i)]);
            const size_t at = size_t(r * n + c);
            wrong += !(std::fabs(double(gv[at]) - want[at]) <= 2.0 * double(k + 1) * 0x1p-24 * mag);
          }
        BOOST_TEST(wrong == 0, bits << " bits" << (symmetric ? "" : " asymmetric") << ", group " << group << ": "
                                    << wrong << " outputs beyond the bound");
      }
}
