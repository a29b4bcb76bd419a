// The FMA attention kernels (cuda/backend/attention_fma_kernels.cuh: f32 on a GPU, and
// 16-bit where the tensor-core kernels do not fit) run on the CPU under an emulation of CUDA
// (cuda/cuda_emulation.h), against the CPU backend's attention: forward and backward, in
// f32 and bf16, at head sizes at and between the instantiations, fewer queries than keys,
// left-padded rows, the heads of a fused projection, and grouped key/value heads (the
// backward's block of a key/value head summing dk and dv over its query heads, against the
// CPU on k and v repeated for every query head).
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/attention_fma_kernels.cuh"
#include "support/check.h"
#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace triad;
using cuda::Destination;
using cuda::Operand;

namespace {

struct FmaCase {
  int64_t b, nh, nkv, tq, tk, hs;
  bool views;        // q as a head view of a fused (B, T, NH hs) tensor, out and dq laid out by position
  int64_t step = 0;  // key_start[b] = b step; 0: none
};

// (B, NKV, T, hs) -> (B, NH, T, hs), f32, each key/value head repeated for its query heads.
Tensor fma_repeated(const Tensor& t, int64_t nh) {
  const int64_t b = t.size(0), nkv = t.size(1), n = t.size(2), hs = t.size(3);
  return ops::contiguous(
      ops::reshape(ops::expand(ops::unsqueeze(ops::to(t, DType::f32), 2), {b, nkv, nh / nkv, n, hs}), {b, nh, n, hs}));
}

template <class E, int HS>
void fma_check(DType dt, const FmaCase& s) {
  const std::string what = std::string(dtype_name(dt)) + " B" + std::to_string(s.b) + " NH" + std::to_string(s.nh) +
                           " NKV" + std::to_string(s.nkv) + " Tq" + std::to_string(s.tq) + " Tk" +
                           std::to_string(s.tk) + " hs" + std::to_string(s.hs) + (s.views ? " views" : "") +
                           (s.step ? " key_start" : "");
  const Shape qs = {s.b, s.nh, s.tq, s.hs}, ks = {s.b, s.nkv, s.tk, s.hs};
  auto by_position = [&](const Tensor& storage) { return ops::transpose(storage, 1, 2); };  // (B, T, NH, hs) storage
  const Tensor q =
      s.views ? by_position(test::uniform_values({s.b, s.tq, s.nh, s.hs}, 80, dt)) : test::uniform_values(qs, 80, dt);
  const Tensor k = test::uniform_values(ks, 81, dt), v = test::uniform_values(ks, 82, dt),
               grad = test::uniform_values(qs, 83, dt);
  const Tensor out = s.views ? by_position(Tensor::empty({s.b, s.tq, s.nh, s.hs}, dt)) : Tensor::empty(qs, dt);
  const double scale = 1.0 / std::sqrt(double(s.hs));
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < s.b; ++b) starts.push_back(b * s.step);
  const Tensor key_start = s.step ? Tensor::from_vector(starts, {s.b}) : Tensor();
  const cuda::Geometry g{int(s.nh),
                         int(s.hs),
                         s.tq,
                         s.tk,
                         float(scale * 1.4426950408889634),
                         s.step ? key_start.data<int64_t>() : nullptr,
                         nullptr,
                         int(s.nh / s.nkv)};
  auto f32 = [](const Tensor& t) { return ops::to(t, DType::f32); };

  Tensor lse = Tensor::empty({s.b, s.nh, s.tq});
  emulation::launch(unsigned(s.b * s.nh), cuda::tiles(s.tq), cuda::kAttnThreads, [&] {
    cuda::attention_kernel<E, HS>(Operand(q), Operand(k), Operand(v), Destination(out),
                                  static_cast<float*>(lse.raw_data()), g);
  });
  Tensor want = Tensor::empty(qs), want_lse = Tensor::empty({s.b, s.nh, s.tq});
  cpu_backend().attention(f32(q), fma_repeated(k, s.nh), fma_repeated(v, s.nh), want, want_lse, scale, key_start);
  const double tol = dt == DType::f32 ? 1e-10 : 3e-5;
  BOOST_TEST(test::normalized_mse(out, want) < tol, what << " out: nmse " << test::normalized_mse(out, want));

  // Backward from the CPU's out (in dt) and lse; D = rowsum(dO o O) from the host.
  const Tensor out_dt = ops::to(want, dt);
  const Tensor dsum = ops::contiguous(ops::reshape(ops::sum(ops::mul(f32(out_dt), f32(grad)), -1), {-1}));
  const Tensor dq = s.views ? by_position(Tensor::zeros({s.b, s.tq, s.nh, s.hs})) : Tensor::zeros(qs);
  const Tensor dk = Tensor::empty(ks, dt), dv = Tensor::empty(ks, dt);
  emulation::launch(unsigned(s.b * s.nkv), cuda::tiles(s.tk), cuda::kAttnThreads, [&] {
    cuda::attention_backward_kernel<E, HS>(
        Operand(q), Operand(k), Operand(v), Operand(grad), static_cast<const float*>(want_lse.raw_data()),
        static_cast<const float*>(dsum.raw_data()), Destination(dq), Destination(dk), Destination(dv), float(scale), g);
  });
  const Shape repeated_ks = {s.b, s.nh, s.tk, s.hs};
  Tensor wdq = Tensor::empty(qs), wdk = Tensor::empty(repeated_ks), wdv = Tensor::empty(repeated_ks);
  cpu_backend().attention_backward(f32(q), fma_repeated(k, s.nh), fma_repeated(v, s.nh), f32(out_dt), want_lse,
                                   f32(grad), wdq, wdk, wdv, scale, key_start);
  auto summed = [&](const Tensor& t) { return ops::sum(ops::reshape(t, {s.b, s.nkv, s.nh / s.nkv, s.tk, s.hs}), 2); };
  BOOST_TEST(test::normalized_mse(dq, wdq) < tol, what << " dq: nmse " << test::normalized_mse(dq, wdq));
  BOOST_TEST(test::normalized_mse(dk, summed(wdk)) < tol,
             what << " dk: nmse " << test::normalized_mse(dk, summed(wdk)));
  BOOST_TEST(test::normalized_mse(dv, summed(wdv)) < tol,
             what << " dv: nmse " << test::normalized_mse(dv, summed(wdv)));
}

template <class E>
void fma_check_size(DType dt, const FmaCase& s) {
  if (s.hs <= 32)
    fma_check<E, 32>(dt, s);
  else if (s.hs <= 64)
    fma_check<E, 64>(dt, s);
  else
    fma_check<E, 128>(dt, s);
}

}  // namespace

BOOST_AUTO_TEST_CASE(fma_f32_matches_the_cpu) {
  for (const FmaCase& s : {FmaCase{1, 2, 2, 70, 70, 64, true}, FmaCase{1, 1, 1, 37, 100, 24, false},
                           FmaCase{2, 1, 1, 70, 70, 40, false, 30}})
    fma_check_size<cuda::F32>(DType::f32, s);
}

// Grouped key/value heads: multi-query (one key/value head for four query heads) and two
// groups, left-padded, in f32 and bf16.
BOOST_AUTO_TEST_CASE(fma_grouped_key_value_heads_match_the_cpu) {
  fma_check_size<cuda::F32>(DType::f32, {2, 4, 1, 70, 70, 32, false, 9});
  fma_check_size<cuda::F32>(DType::f32, {1, 4, 2, 65, 65, 64, true});
  fma_check_size<cuda::BF16>(DType::bf16, {1, 4, 2, 70, 70, 128, false});
}
