// The CUDA backend's token sampling kernel (cuda/backend/sample_kernels.cuh) runs on the CPU
// under an emulation of CUDA (cuda/cuda_emulation.h) and must pick, for every row, the token
// the CPU backend picks (Note [Token sampling]): greedy, top-k, top-p and temperature, ties
// between equal logits (ordered by token id), draws per (seed, global sample, step), rows
// already done, the stop test, a padded vocabulary whose extra columns take no part, and
// rows stored any stride apart. The kernel's speed, and its double exp's last bit against
// the host's, need a GPU.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernel's header takes the builtins from it.
#include "cuda/backend/sample_kernels.cuh"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace triad;

namespace {

constexpr int64_t kRows = 6, kVocab = 100, kWidth = 120, kStride = 136;

// (kRows, kStride) logits in [-4, 4) rounded to quarters, so that many tie; the columns past
// kVocab hold 100, which a kernel reading the padding would pick.
Tensor tied_logits(uint64_t seed) {
  Tensor t = Tensor::empty({kRows, kStride});
  Generator g(seed);
  ops::uniform_(t, -4, 4, g);
  std::vector<float> v = t.to_vector<float>();
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < kStride; ++j) {
      float& x = v[size_t(r * kStride + j)];
      x = j < kVocab ? std::round(x * 4) / 4 : 100.0f;
    }
  return Tensor::from_vector(v, {kRows, kStride});
}

struct Sampled {
  std::vector<int64_t> tokens;
  std::vector<float> logprobs, mask, done;
};

// step, when defined, the step the draws use instead of s.step (as ops::sample_tokens_'s).
Sampled on_cpu(const Tensor& logits, const TokenSampling& s, const std::vector<float>& done,
               const Tensor& step = Tensor()) {
  const Tensor rows = ops::narrow(logits, 1, 0, kWidth);
  Tensor d = Tensor::from_vector(done, {kRows}), t = Tensor::empty({kRows}, DType::i64);
  Tensor lp = Tensor::empty({kRows}), m = Tensor::empty({kRows});
  backend_for(Device::cpu()).sample_tokens(rows, kVocab, s, d, t, lp, m, step);
  return {t.to_vector<int64_t>(), lp.to_vector<float>(), m.to_vector<float>(), d.to_vector<float>()};
}

Sampled emulated(const Tensor& logits, const TokenSampling& s, const std::vector<float>& done,
                 const Tensor& step = Tensor()) {
  Sampled r{std::vector<int64_t>(kRows, -1), std::vector<float>(kRows, -1), std::vector<float>(kRows, -1), done};
  emulation::launch(unsigned(kRows), 1, 64, [&] {
    cuda::sample_kernel(logits.data<float>(), kStride, kVocab, s, step.defined() ? step.data<int64_t>() : nullptr,
                        r.done.data(), r.tokens.data(), r.logprobs.data(), r.mask.data());
  });
  return r;
}

void check_same(const Sampled& got, const Sampled& want, const std::string& what) {
  for (int64_t b = 0; b < kRows; ++b) {
    BOOST_TEST(got.tokens[b] == want.tokens[b], what << " row " << b);
    BOOST_TEST(got.mask[b] == want.mask[b], what << " row " << b);
    BOOST_TEST(got.done[b] == want.done[b], what << " row " << b);
    BOOST_TEST(std::fabs(got.logprobs[b] - want.logprobs[b]) <= 1e-6 * (1 + std::fabs(want.logprobs[b])),
               what << " row " << b << ": log-probability " << got.logprobs[b] << ", want " << want.logprobs[b]);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_row_picks_the_cpu_token) {
  const Tensor logits = tied_logits(11);
  struct Case {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  int distinct = 0;  // configurations whose tokens differ from greedy: the draws matter
  std::vector<int64_t> greedy;
  for (const Case c : {Case{0, 40, 0.95}, Case{0.8, 40, 0.95}, Case{1.3, 5, 1.0}, Case{1.0, 1, 1.0},
                       Case{0.7, 0, 0.5}, Case{2.0, 80, 0.99}, Case{1.0, 0, 1.0}, Case{0.6, kVocab, 1.0},
                       Case{1.5, 1000, 1.0}}) {
    for (int64_t step : {0, 3}) {
      const TokenSampling s{.temperature = c.temperature, .top_k = c.top_k, .top_p = c.top_p, .seed = 17,
                            .first_sample = 7, .step = step, .stop_token = -1, .pad_token = 2};
      const std::string what = "temperature " + std::to_string(c.temperature) + " top_k " + std::to_string(c.top_k) +
                               " top_p " + std::to_string(c.top_p) + " step " + std::to_string(step);
      const std::vector<float> done(kRows, 0.0f);
      const Sampled want = on_cpu(logits, s, done);
      check_same(emulated(logits, s, done), want, what);
      for (int64_t t : want.tokens) BOOST_TEST((t >= 0 && t < kVocab), what);
      if (c.temperature == 0) greedy = want.tokens;
      else distinct += want.tokens != greedy;
    }
  }
  BOOST_TEST(distinct >= 12);
}

// Ties: with every logit equal, top-k's candidates are the lowest ids, and greedy is token 0.
BOOST_AUTO_TEST_CASE(equal_logits_order_by_token_id) {
  const Tensor logits = Tensor::full({kRows, kStride}, 0.5);
  const std::vector<float> done(kRows, 0.0f);
  TokenSampling s{.temperature = 0, .top_k = 0, .top_p = 1, .seed = 3};
  const Sampled greedy = emulated(logits, s, done);
  for (int64_t b = 0; b < kRows; ++b) BOOST_TEST(greedy.tokens[b] == 0);
  s.temperature = 1;
  s.top_k = 3;
  const Sampled three = emulated(logits, s, done);
  check_same(three, on_cpu(logits, s, done), "three equal candidates");
  for (int64_t b = 0; b < kRows; ++b) {
    BOOST_TEST(three.tokens[b] < 3);
    BOOST_TEST(std::fabs(three.logprobs[b] + std::log(double(kVocab))) < 1e-6);
  }
}

// A done row takes the pad token, mask 0 and log-probability 0 and stays done; a row that
// samples the stop token becomes done; the others stay as they were.
BOOST_AUTO_TEST_CASE(done_rows_and_the_stop_test) {
  const Tensor logits = tied_logits(5);
  TokenSampling s{.temperature = 0.9, .top_k = 20, .top_p = 0.9, .seed = 8, .first_sample = 2, .step = 1, .pad_token = 4};
  std::vector<float> done(kRows, 0.0f);
  done[1] = done[4] = 1.0f;
  const Sampled free_run = on_cpu(logits, s, std::vector<float>(kRows, 0.0f));
  s.stop_token = free_run.tokens[3];
  const Sampled want = on_cpu(logits, s, done);
  const Sampled got = emulated(logits, s, done);
  check_same(got, want, "done rows");
  for (int64_t b : {1, 4}) {
    BOOST_TEST(got.tokens[b] == 4);
    BOOST_TEST(got.mask[b] == 0.0f);
    BOOST_TEST(got.logprobs[b] == 0.0f);
    BOOST_TEST(got.done[b] == 1.0f);
  }
  BOOST_TEST(got.done[3] == 1.0f);
  BOOST_TEST(got.tokens[3] == s.stop_token);
  for (int64_t b : {0, 2, 5}) BOOST_TEST(got.done[b] == float(got.tokens[b] == s.stop_token));
}

// A step read from memory (a decode step replayed as a CUDA graph: Note [Positions on the
// device] in tensor/ops.h) draws what that step given in the launch draws, on the kernel and
// on the CPU, whatever the launch's own step says; different steps draw differently.
BOOST_AUTO_TEST_CASE(a_step_read_from_memory_draws_as_that_step) {
  const Tensor logits = tied_logits(23);
  const std::vector<float> done(kRows, 0.0f);
  TokenSampling s{.temperature = 1.2, .top_k = 0, .top_p = 1.0, .seed = 31, .first_sample = 4, .step = 99};
  int differ = 0;
  std::vector<int64_t> first;
  for (int64_t step : {0, 1, 7}) {
    const Tensor at = Tensor::from_vector(std::vector<int64_t>{step}, {1});
    TokenSampling fixed = s;
    fixed.step = step;
    const Sampled want = on_cpu(logits, fixed, done);
    check_same(on_cpu(logits, s, done, at), want, "cpu, step " + std::to_string(step) + " from memory");
    check_same(emulated(logits, s, done, at), want, "kernel, step " + std::to_string(step) + " from memory");
    if (step == 0) first = want.tokens;
    else differ += want.tokens != first;
  }
  BOOST_TEST(differ == 2);
}
