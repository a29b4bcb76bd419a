// The tensor-core attention kernels (cuda/backend/attention_mma_kernels.cuh) run on the
// CPU under an emulation of CUDA (cuda/cuda_emulation.h), against the CPU backend's
// attention, as test_backend_cuda checks them on a GPU: the same geometries and
// thresholds, bf16 and f16, forward and backward. So their indexing, masking, tiling and
// synchronization are checked where no GPU is; their speed and the hardware's own rules
// are not.
#include <boost/test/unit_test.hpp>
#include <tuple>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes mma.sync, ldmatrix, cp.async and the
// builtins from it.
#include "cuda/backend/attention_mma_kernels.cuh"
#include "support/check.h"
#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace triad;
using cuda::Operand;

namespace {

double threshold(DType t) { return t == DType::bf16 ? 3e-5 : 1e-6; }

struct Geometry {
  int64_t b, nh, tq, tk, hs;
  bool views;        // q, k, v as views of one (B, T, 3 NH hs) tensor
  int64_t step = 0;  // key_start[b] = b step (left-padded rows); 0: no key_start
};

// Whether a and b are infinite at the same places.
bool same_infinities(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = ops::to(a, DType::f32).to_vector<float>(), y = ops::to(b, DType::f32).to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isinf(x[i]) != std::isinf(y[i])) return false;
  return true;
}

// t with its infinite values (the lse of queries that see no key) as 0.
Tensor finite(const Tensor& t) {
  std::vector<float> v = ops::to(t, DType::f32).to_vector<float>();
  for (float& x : v) x = std::isinf(x) ? 0.0f : x;
  return Tensor::from_vector(v, t.shape());
}

template <class E, int HS>
void check(DType dt, const Geometry& s) {
  const std::string what = std::string(dtype_name(dt)) + " B" + std::to_string(s.b) + " NH" + std::to_string(s.nh) +
                           " Tq" + std::to_string(s.tq) + " Tk" + std::to_string(s.tk) + " hs" +
                           std::to_string(s.hs) + (s.views ? " views" : "") +
                           (s.step ? " key_start step " + std::to_string(s.step) : "");
  const Shape qs = {s.b, s.nh, s.tq, s.hs}, ks = {s.b, s.nh, s.tk, s.hs};
  // With views, q, k and v are the heads of one fused (B, T, 3C) projection, out is laid out
  // (B, T, NH, hs) and dq, dk, dv are heads of fused gradients, as the ops give them (Note
  // [Attention layout] in tensor/ops.h); else all are contiguous.
  const int64_t c = s.nh * s.hs;
  auto part = [&](const Tensor& fused, int64_t i) {
    return ops::transpose(ops::reshape(ops::narrow(fused, 2, i * c, c), {s.b, s.tq, s.nh, s.hs}), 1, 2);
  };
  Tensor q, k, v, out, dk, dv;
  if (s.views) {
    const Tensor base = test::uniform_values({s.b, s.tq, 3 * c}, 60, dt),
                 fused_grad = Tensor::empty({s.b, s.tq, 3 * c}, dt);
    q = part(base, 0), k = part(base, 1), v = part(base, 2);
    out = ops::transpose(Tensor::empty({s.b, s.tq, s.nh, s.hs}, dt), 1, 2);
    dk = part(fused_grad, 1), dv = part(fused_grad, 2);
  } else {
    q = test::uniform_values(qs, 61, dt), k = test::uniform_values(ks, 62, dt), v = test::uniform_values(ks, 63, dt);
    out = Tensor::empty(qs, dt), dk = Tensor::empty(ks, dt), dv = Tensor::empty(ks, dt);
  }
  const Tensor grad = test::uniform_values(qs, 64, dt);
  const double scale = 1.0 / std::sqrt(double(s.hs));
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < s.b; ++b) starts.push_back(b * s.step);
  const Tensor key_start = s.step ? Tensor::from_vector(starts, {s.b}) : Tensor();
  const cuda::Geometry g{int(s.nh), int(s.hs), s.tq, s.tk, float(scale * 1.4426950408889634),
                         s.step ? key_start.data<int64_t>() : nullptr};
  const unsigned bh = unsigned(s.b * s.nh);
  const unsigned whole = cuda::whole_rows<HS>({&q, &k, &v, &grad});
  auto f32 = [](const Tensor& t) { return ops::to(t, DType::f32); };

  // Forward, against the CPU on the same (rounded) values in f32.
  Tensor lse = Tensor::empty({s.b, s.nh, s.tq});
  emulation::launch(bh, cuda::tiles(s.tq, cuda::Layout<HS>::kQueryRows), 128, [&] {
    cuda::mma_attention_kernel<E, HS>(Operand(q), Operand(k), Operand(v), cuda::Destination(out),
                                      static_cast<float*>(lse.raw_data()), g, whole & 7u);
  });
  Tensor want = Tensor::empty(qs), want_lse = Tensor::empty({s.b, s.nh, s.tq});
  cpu_backend().attention(f32(q), f32(k), f32(v), want, want_lse, scale, key_start);
  BOOST_TEST(test::normalized_mse(out, want) < threshold(dt), what << " out: nmse " << test::normalized_mse(out, want));
  BOOST_TEST(test::normalized_mse(finite(lse), finite(want_lse)) < 1e-10,
             what << " lse: nmse " << test::normalized_mse(finite(lse), finite(want_lse)));
  BOOST_TEST(same_infinities(lse, want_lse), what << " lse: queries that see no key differ");

  // Backward from the CPU's out (rounded to dt) and lse. D = rowsum(dO o O) comes from the
  // host (its kernel, shared with the FMA path, would cost 32 emulated threads a row).
  const Tensor out_dt = ops::to(want, dt);
  const Tensor dsum = ops::reshape(ops::sum(ops::mul(f32(out_dt), f32(grad)), -1), {-1});
  const Tensor dq = s.views ? part(Tensor::zeros({s.b, s.tq, 3 * c}), 0) : Tensor::zeros(qs);  // f32, summed into
  emulation::launch(bh, unsigned((s.tk + 63) / 64), 128, [&] {
    cuda::mma_attention_backward_kernel<E, HS>(
        Operand(q), Operand(k), Operand(v), Operand(grad), static_cast<const float*>(want_lse.raw_data()),
        static_cast<const float*>(ops::contiguous(dsum).raw_data()), cuda::Destination(dq),
        cuda::Destination(dk), cuda::Destination(dv), float(scale), g, whole);
  });
  Tensor wdq = Tensor::empty(qs), wdk = Tensor::empty(ks), wdv = Tensor::empty(ks);
  cpu_backend().attention_backward(f32(q), f32(k), f32(v), f32(out_dt), want_lse, f32(grad), wdq, wdk, wdv, scale,
                                   key_start);
  if (s.tk == 1) {  // one key: P = 1 and dP = D, so dq and dk are 0 up to rounding
    BOOST_TEST(ops::max_abs(dq) < 1e-5, what << " dq");
    BOOST_TEST(ops::max_abs(f32(dk)) < 1e-5, what << " dk");
  } else {
    BOOST_TEST(test::normalized_mse(dq, wdq) < threshold(dt), what << " dq: nmse " << test::normalized_mse(dq, wdq));
    BOOST_TEST(test::normalized_mse(dk, wdk) < threshold(dt), what << " dk: nmse " << test::normalized_mse(dk, wdk));
  }
  BOOST_TEST(test::normalized_mse(dv, wdv) < threshold(dt), what << " dv: nmse " << test::normalized_mse(dv, wdv));
}

// Smaller forms of test_backend_cuda's geometries (an emulated block costs a fraction of a
// second): head sizes at and between the instantiations (32, 64, 128), one position, fewer
// queries than keys, T not a multiple of the 64-row tile (nor of the forward's 128-query
// block up to head size 64), and strided views of a fused qkv projection, with the
// kernels' 16-byte loads (hs 64 and 128) and without.
const Geometry kGeometries[] = {{1, 1, 100, 100, 64, false}, {1, 1, 1, 1, 32, false},    {1, 1, 130, 130, 128, false},
                                {1, 1, 37, 160, 24, false},  {1, 2, 96, 96, 16, true},   {1, 2, 64, 64, 64, true},
                                {1, 1, 300, 300, 64, true}};

template <class E>
void check_geometry(DType dt, const Geometry& s) {
  if (s.hs <= 32)
    check<E, 32>(dt, s);
  else if (s.hs <= 64)
    check<E, 64>(dt, s);
  else
    check<E, 128>(dt, s);
}

}  // namespace

BOOST_AUTO_TEST_CASE(bf16_matches_the_cpu) {
  for (const Geometry& g : kGeometries) check_geometry<cuda::BF16>(DType::bf16, g);
}

// Left-padded rows (ops::causal_attention's key_start): rows whose first key is 0, 50 and
// 100 of 130 (the first key tile skipped, the second masked in part; queries before the
// first key output 0), and decoding 3 queries after 90 keys.
BOOST_AUTO_TEST_CASE(key_start_matches_the_cpu) {
  check_geometry<cuda::BF16>(DType::bf16, {3, 1, 130, 130, 32, false, 50});
  check_geometry<cuda::BF16>(DType::bf16, {2, 2, 3, 90, 64, false, 70});
}

// f16 shares every line but the element type: two geometries.
BOOST_AUTO_TEST_CASE(f16_matches_the_cpu) {
  check_geometry<cuda::F16>(DType::f16, kGeometries[0]);
  check_geometry<cuda::F16>(DType::f16, kGeometries[3]);
}

// Grouped-query attention (the Llama's): query head h reads key/value head h / group in
// place, and the backward's block of a key/value head sums dk and dv over its group;
// against the CPU on k and v repeated for every query head (dk, dv summed over each group
// there). Multi-query (one key/value head) and two groups, left-padded.
BOOST_AUTO_TEST_CASE(grouped_key_value_heads_match_the_cpu) {
  const int64_t B = 2, NH = 4, T = 70, hs = 64;
  const Tensor key_start = Tensor::from_vector(std::vector<int64_t>{0, 9}, {B});
  for (int64_t nkv : {1, 2}) {
    const std::string what = "NKV " + std::to_string(nkv);
    const Tensor q = test::uniform_values({B, NH, T, hs}, 74, DType::bf16),
                 k = test::uniform_values({B, nkv, T, hs}, 75, DType::bf16),
                 v = test::uniform_values({B, nkv, T, hs}, 76, DType::bf16);
    const double scale = 1.0 / std::sqrt(double(hs));
    const cuda::Geometry g{int(NH), int(hs),      T, T, float(scale * 1.4426950408889634), key_start.data<int64_t>(),
                           nullptr, int(NH / nkv)};
    Tensor out = Tensor::empty({B, NH, T, hs}, DType::bf16), lse = Tensor::empty({B, NH, T});
    emulation::launch(unsigned(B * NH), cuda::tiles(T, cuda::Layout<64>::kQueryRows), 128, [&] {
      cuda::mma_attention_kernel<cuda::BF16, 64>(Operand(q), Operand(k), Operand(v), cuda::Destination(out),
                                                 static_cast<float*>(lse.raw_data()), g,
                                                 cuda::whole_rows<64>({&q, &k, &v}));
    });
    auto repeated = [&](const Tensor& t) {
      return ops::contiguous(ops::reshape(
          ops::expand(ops::unsqueeze(ops::to(t, DType::f32), 2), {B, nkv, NH / nkv, T, hs}), {B, NH, T, hs}));
    };
    Tensor want = Tensor::empty({B, NH, T, hs}), want_lse = Tensor::empty({B, NH, T});
    cpu_backend().attention(ops::to(q, DType::f32), repeated(k), repeated(v), want, want_lse, scale, key_start);
    BOOST_TEST(test::normalized_mse(out, want) < threshold(DType::bf16),
               what << " out: nmse " << test::normalized_mse(out, want));
    BOOST_TEST(test::normalized_mse(finite(lse), finite(want_lse)) < 1e-10, what << " lse");

    const Tensor out_bf16 = ops::to(want, DType::bf16), grad = test::uniform_values({B, NH, T, hs}, 77, DType::bf16);
    const Tensor dsum = ops::contiguous(
        ops::reshape(ops::sum(ops::mul(ops::to(out_bf16, DType::f32), ops::to(grad, DType::f32)), -1), {-1}));
    const Tensor dq = Tensor::zeros({B, NH, T, hs});
    Tensor dk = Tensor::empty({B, nkv, T, hs}, DType::bf16), dv = Tensor::empty({B, nkv, T, hs}, DType::bf16);
    emulation::launch(unsigned(B * nkv), cuda::tiles(T), 128, [&] {
      cuda::mma_attention_backward_kernel<cuda::BF16, 64>(
          Operand(q), Operand(k), Operand(v), Operand(grad), static_cast<const float*>(want_lse.raw_data()),
          static_cast<const float*>(dsum.raw_data()), cuda::Destination(dq), cuda::Destination(dk),
          cuda::Destination(dv), float(scale), g, cuda::whole_rows<64>({&q, &k, &v, &grad}));
    });
    Tensor wdq = Tensor::empty({B, NH, T, hs}), wdk = Tensor::empty({B, NH, T, hs}),
           wdv = Tensor::empty({B, NH, T, hs});
    cpu_backend().attention_backward(ops::to(q, DType::f32), repeated(k), repeated(v), ops::to(out_bf16, DType::f32),
                                     want_lse, ops::to(grad, DType::f32), wdq, wdk, wdv, scale, key_start);
    auto summed = [&](const Tensor& t) { return ops::sum(ops::reshape(t, {B, nkv, NH / nkv, T, hs}), 2); };
    BOOST_TEST(test::normalized_mse(dq, wdq) < threshold(DType::bf16),
               what << " dq: nmse " << test::normalized_mse(dq, wdq));
    BOOST_TEST(test::normalized_mse(dk, summed(wdk)) < threshold(DType::bf16),
               what << " dk: nmse " << test::normalized_mse(dk, summed(wdk)));
    BOOST_TEST(test::normalized_mse(dv, summed(wdv)) < threshold(DType::bf16),
               what << " dv: nmse " << test::normalized_mse(dv, summed(wdv)));
  }
}

// A decode step over a whole cache (ops::causal_attention's cached: Note [Positions on the
// device] in tensor/ops.h): of k and v's 160 positions only the first cached + Tq count, read
// from memory; the rest hold 50, which would dominate any score or output that read them.
// Against the CPU on k and v narrowed to the keys that count, with and without key_start.
BOOST_AUTO_TEST_CASE(cached_keys_match_the_cpu) {
  const int64_t B = 2, NH = 2, cap = 160, hs = 64;
  for (const auto& [tq, cached, step] : {std::tuple<int64_t, int64_t, int64_t>{1, 70, 0}, {1, 127, 30}, {3, 64, 20}}) {
    const std::string what = "Tq " + std::to_string(tq) + " after " + std::to_string(cached) + " cached keys" +
                             (step ? ", key_start step " + std::to_string(step) : "");
    const Tensor q = test::uniform_values({B, NH, tq, hs}, 71, DType::bf16);
    Tensor k = test::uniform_values({B, NH, cap, hs}, 72, DType::bf16),
           v = test::uniform_values({B, NH, cap, hs}, 73, DType::bf16);
    const int64_t keys = cached + tq;
    ops::fill_(ops::narrow(k, 2, keys, cap - keys), 50.0);
    ops::fill_(ops::narrow(v, 2, keys, cap - keys), 50.0);
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < B; ++b) starts.push_back(b * step);
    const Tensor key_start = step ? Tensor::from_vector(starts, {B}) : Tensor();
    const Tensor at = Tensor::from_vector(std::vector<int64_t>{cached}, {1});
    const double scale = 1.0 / std::sqrt(double(hs));
    const cuda::Geometry g{int(NH), int(hs), tq, cap, float(scale * 1.4426950408889634),
                           step ? key_start.data<int64_t>() : nullptr, at.data<int64_t>()};
    Tensor out = Tensor::empty({B, NH, tq, hs}, DType::bf16), lse = Tensor::empty({B, NH, tq});
    emulation::launch(unsigned(B * NH), 1, 128, [&] {
      cuda::mma_attention_kernel<cuda::BF16, 64>(Operand(q), Operand(k), Operand(v), cuda::Destination(out),
                                                 static_cast<float*>(lse.raw_data()), g,
                                                 cuda::whole_rows<64>({&q, &k, &v}));
    });
    auto f32 = [](const Tensor& t) { return ops::to(t, DType::f32); };
    Tensor want = Tensor::empty({B, NH, tq, hs}), want_lse = Tensor::empty({B, NH, tq});
    cpu_backend().attention(f32(q), f32(ops::narrow(k, 2, 0, keys)), f32(ops::narrow(v, 2, 0, keys)), want, want_lse,
                            scale, key_start);
    BOOST_TEST(test::normalized_mse(out, want) < threshold(DType::bf16),
               what << " out: nmse " << test::normalized_mse(out, want));
    BOOST_TEST(test::normalized_mse(lse, want_lse) < 1e-10,
               what << " lse: nmse " << test::normalized_mse(lse, want_lse));
    // The CPU backend's own cached path narrows as above.
    Tensor cpu_out = Tensor::empty({B, NH, tq, hs}), cpu_lse = Tensor::empty({B, NH, tq});
    cpu_backend().attention(f32(q), f32(k), f32(v), cpu_out, cpu_lse, scale, key_start, at);
    BOOST_TEST(ops::max_abs(ops::sub(cpu_out, want)) == 0.0, what);
    BOOST_TEST(ops::max_abs(ops::sub(cpu_lse, want_lse)) == 0.0, what);
  }
}
