// The CUDA backend's Mixture-of-Experts routing kernels (cuda/backend/moe_route_kernels.cuh)
// run on the CPU under an emulation of CUDA (cuda/cuda_emulation.h) and must route every
// token as the CPU backend does (Note [MoE routing]): the experts chosen (ties, Gumbel
// noise given or drawn), the loads, and the slots: top-1 with and without random token
// selection, top-2's second choices after all first choices, top-k's priority by
// probability, over capacity and dropless, with tied priorities, and more choices per
// expert than a block has threads. Then the gather indices (ops::moe_indices). The kernels'
// speed, and the Gumbel noise's last bit against the host's log, need a GPU.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/moe_route_kernels.cuh"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace triad;

namespace {

// (S, E) values in [low, high) rounded to quarters, so that many tie.
std::vector<float> moe_tied(int64_t S, int64_t E, uint64_t seed, double low, double high) {
  Tensor t = Tensor::empty({S, E});
  Generator g(seed);
  ops::uniform_(t, low, high, g);
  std::vector<float> v = t.to_vector<float>();
  for (float& x : v) x = std::round(x * 4) / 4;
  return v;
}

struct MoECase {
  int64_t S, E, K, capacity;  // capacity -1: dropless
  bool noise, priority;       // drawn Gumbel noise; drawn RTS priorities (k = 1)
  bool given_priority;        // tied priorities given instead (k = 1)
  unsigned threads;           // of a placement block
};

struct MoERouted {
  std::vector<int64_t> expert, location, load, first_load;
};

RouteValues moe_values(const Tensor& t) {
  RouteValues v;
  if (t.defined() && t.dtype() == DType::f64) v.f64 = t.data<double>();
  if (t.defined() && t.dtype() == DType::f32) v.f32 = t.data<float>();
  return v;
}

MoERouted moe_emulated(const Tensor& probs, const Tensor& logits, const Tensor& priority, const MoERouting& r,
                       unsigned threads) {
  const int64_t S = probs.size(0), E = probs.size(1), K = r.k;
  MoERouted out{std::vector<int64_t>(size_t(S * K), -7), std::vector<int64_t>(size_t(S * K), -7),
                std::vector<int64_t>(size_t(E), -7), std::vector<int64_t>(size_t(E), -7)};
  RouteValues noise;
  noise.draws = r.noise, noise.gumbel = true;
  RouteValues by;
  if (K == 1) {
    by = moe_values(priority);
    if (!priority.defined()) by.draws = r.priority;
  } else if (K >= 3) {
    by = moe_values(probs);
  }
  emulation::launch(unsigned((S + 31) / 32), 1, 32, [&] {
    cuda::moe_choose_kernel(moe_values(probs), moe_values(logits), noise, S, E, K, out.expert.data());
  });
  emulation::launch(unsigned(E), 1, threads, [&] {
    cuda::moe_place_kernel(out.expert.data(), S, E, K, r.capacity, by, out.location.data(), out.load.data(),
                           out.first_load.data());
  });
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(moe_kernels_route_every_token_as_the_cpu) {
  const MoECase cases[] = {
      {40, 4, 1, 6, false, false, false, 32},    // top-1 over capacity, first tokens kept
      {40, 4, 1, 6, false, true, false, 32},     // random token selection, drawn priorities
      {40, 2, 1, 7, true, false, true, 64},      // RSample noise, tied priorities given, two warps
      {300, 2, 1, 90, false, false, true, 32},   // many ties at the capacity-th priority, many chunks
      {300, 3, 1, 90, false, true, false, 32},   // more choices per expert than threads
      {37, 4, 1, -1, false, false, false, 32},   // dropless
      {40, 4, 2, 9, false, false, false, 32},    // top-2 positional, second choices after the first
      {300, 5, 2, 100, true, false, false, 64},  // top-2 sampled, many chunks
      {29, 3, 2, -1, true, false, false, 32},    // top-2 dropless
      {40, 6, 3, 12, false, false, false, 32},   // top-k kept by probability (tied)
      {200, 8, 4, 60, false, false, false, 64},  // top-k, several chunks
      {25, 5, 5, -1, false, false, false, 32},   // k = E dropless
      {1, 3, 2, 1, true, false, false, 32},      // one token
  };
  int over = 0;  // cases in which some choice was dropped: the selection ran
  for (const MoECase& c : cases) {
    BOOST_TEST_CONTEXT("S " << c.S << " E " << c.E << " k " << c.K << " capacity " << c.capacity) {
      const uint64_t seed = uint64_t(c.S * 131 + c.E * 7 + c.K);
      const Tensor logits = Tensor::from_vector(moe_tied(c.S, c.E, seed, -2, 2), {c.S, c.E});
      const Tensor probs = ops::softmax(logits);
      MoERouting r{.k = c.K, .capacity = c.capacity};
      if (c.noise) r.noise = {.drawn = true, .seed = seed, .first = 1000};
      if (c.priority) r.priority = {.drawn = true, .seed = seed + 1, .first = 77};
      Tensor priority;
      if (c.given_priority) {
        std::vector<double> tied;  // 0, 0.5 or 1
        for (float x : moe_tied(c.S, c.E, seed + 2, 0, 1)) tied.push_back(std::round(x * 2) / 2);
        priority = Tensor::from_vector(tied, {c.S, c.E});
      }
      const ops::MoERouteOut cpu = ops::moe_route(probs, logits, r, Tensor(), priority);
      const MoERouted gpu = moe_emulated(probs, logits, priority, r, c.threads);
      BOOST_TEST(gpu.expert == cpu.expert.to_vector<int64_t>(), boost::test_tools::per_element());
      BOOST_TEST(gpu.location == cpu.location.to_vector<int64_t>(), boost::test_tools::per_element());
      BOOST_TEST(gpu.load == cpu.load.to_vector<int64_t>(), boost::test_tools::per_element());
      BOOST_TEST(gpu.first_load == cpu.first_load.to_vector<int64_t>(), boost::test_tools::per_element());
      int64_t dropped = 0, kept = 0;
      for (int64_t l : gpu.location) (l < 0 ? dropped : kept) += 1;
      over += dropped > 0;
      BOOST_TEST(kept + dropped == c.S * c.K);
      if (c.capacity < 0) BOOST_TEST(dropped == 0);
    }
  }
  BOOST_TEST(over >= 7);
}

BOOST_AUTO_TEST_CASE(moe_indices_kernel_writes_the_cpu_indices) {
  const int64_t S = 50, E = 4, K = 2, C = 20;
  const Tensor logits = Tensor::from_vector(moe_tied(S, E, 5, -2, 2), {S, E});
  const ops::MoERouteOut r = ops::moe_route(ops::softmax(logits), logits, {.k = K, .capacity = C});
  const ops::MoEIndices cpu = ops::moe_indices(r.expert, r.location, E, C);
  std::vector<int64_t> choice(size_t(S * K), -7), slot(size_t(S * K), -7), source(size_t(E * C), S);
  emulation::launch(4, 1, 32, [&] {
    cuda::moe_indices_kernel(r.expert.data<int64_t>(), r.location.data<int64_t>(), S, K, E, C, nullptr, E * C,
                             choice.data(), slot.data(), source.data());
  });
  BOOST_TEST(choice == cpu.choice.to_vector<int64_t>(), boost::test_tools::per_element());
  BOOST_TEST(slot == cpu.slot.to_vector<int64_t>(), boost::test_tools::per_element());
  BOOST_TEST(source == cpu.source.to_vector<int64_t>(), boost::test_tools::per_element());
  // Closed form: a kept choice's slot holds its token, and its choice index its probability.
  const std::vector<int64_t> ex = r.expert.to_vector<int64_t>(), loc = r.location.to_vector<int64_t>();
  int64_t empty = E * C;
  for (int64_t c = 0; c < S * K; ++c) {
    if (loc[size_t(c)] < 0) {
      BOOST_TEST(slot[size_t(c)] == E * C);
      BOOST_TEST(choice[size_t(c)] == S * E);
      continue;
    }
    --empty;
    BOOST_TEST(source[size_t(ex[size_t(c)] * C + loc[size_t(c)])] == c / K);
    BOOST_TEST(choice[size_t(c)] == (c / K) * E + ex[size_t(c)]);
  }
  int64_t unfilled = 0;
  for (int64_t s : source) unfilled += s == S;
  BOOST_TEST(unfilled == empty);
}

BOOST_AUTO_TEST_CASE(moe_indices_kernel_writes_the_cpu_dropless_rows) {
  const int64_t S = 50, E = 5, K = 2;
  const Tensor logits = Tensor::from_vector(moe_tied(S, E, 6, -2, 2), {S, E});
  const ops::MoERouteOut r = ops::moe_route(ops::softmax(logits), logits, {.k = K, .capacity = -1});
  const ops::MoEIndices cpu = ops::moe_indices_dropless(r.expert, r.location, r.load);
  std::vector<int64_t> choice(size_t(S * K), -7), slot(size_t(S * K), -7), source(size_t(S * K), S);
  emulation::launch(4, 1, 32, [&] {
    cuda::moe_indices_kernel(r.expert.data<int64_t>(), r.location.data<int64_t>(), S, K, E, 0, r.load.data<int64_t>(),
                             S * K, choice.data(), slot.data(), source.data());
  });
  BOOST_TEST(choice == cpu.choice.to_vector<int64_t>(), boost::test_tools::per_element());
  BOOST_TEST(slot == cpu.slot.to_vector<int64_t>(), boost::test_tools::per_element());
  BOOST_TEST(source == cpu.source.to_vector<int64_t>(), boost::test_tools::per_element());
  // Closed form: expert e's rows follow the loads of the experts before it, every row
  // holds the token of its choice, and none is empty.
  const std::vector<int64_t> ex = r.expert.to_vector<int64_t>(), loc = r.location.to_vector<int64_t>(),
                             load = r.load.to_vector<int64_t>();
  for (int64_t c = 0; c < S * K; ++c) {
    int64_t start = 0;
    for (int64_t e = 0; e < ex[size_t(c)]; ++e) start += load[size_t(e)];
    BOOST_TEST(slot[size_t(c)] == start + loc[size_t(c)]);
    BOOST_TEST(source[size_t(slot[size_t(c)])] == c / K);
  }
}
