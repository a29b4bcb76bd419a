// Token sampling rules and generation over the KV cache.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <map>

#include "engine/generate.h"
#include "tensor/random.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_generate)

using namespace triad;
using engine::SamplingOptions;

BOOST_AUTO_TEST_CASE(greedy_takes_the_argmax) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  BOOST_TEST(engine::sample_token(logits.data(), 4, {.temperature = 0.0}, 0.99) == 1);
}

BOOST_AUTO_TEST_CASE(top_k_and_top_p_restrict_the_support) {
  // Probabilities at temperature 1: exp(l) / sum for l = log(0.5), log(0.3), log(0.15), log(0.05).
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  std::map<int, int> top2, nucleus, all;
  for (int i = 0; i < 4000; ++i) {
    const double u = random_uniform(9, uint64_t(i));
    ++top2[engine::sample_token(logits.data(), 4, {.temperature = 1.0, .top_k = 2, .top_p = 1.0}, u)];
    ++nucleus[engine::sample_token(logits.data(), 4, {.temperature = 1.0, .top_k = 0, .top_p = 0.7}, u)];
    ++all[engine::sample_token(logits.data(), 4, {.temperature = 1.0, .top_k = 0, .top_p = 1.0}, u)];
  }
  BOOST_TEST(top2.size() == 2u);                          // only tokens 0 and 1
  BOOST_TEST(std::abs(top2[0] / 4000.0 - 0.625) < 0.03);  // 0.5 / 0.8
  BOOST_TEST(nucleus.size() == 2u);                       // 0.5 < 0.7 <= 0.5 + 0.3
  BOOST_TEST(all.size() == 4u);
  BOOST_TEST(std::abs(all[3] / 4000.0 - 0.05) < 0.015);
}

// Untruncated (Note [Token sampling]): the draw walks the tokens in id order, so u falls in
// token j's interval [p_0 + ... + p_{j-1}, p_0 + ... + p_j) of the cumulative probabilities.
BOOST_AUTO_TEST_CASE(an_untruncated_draw_walks_the_tokens_in_id_order) {
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  const SamplingOptions all{.temperature = 1.0, .top_k = 0, .top_p = 1.0};
  for (const auto& [u, token] : std::vector<std::pair<double, int32_t>>{
           {0.0, 0}, {0.14, 0}, {0.16, 1}, {0.64, 1}, {0.66, 2}, {0.69, 2}, {0.71, 3}, {0.999, 3}})
    BOOST_TEST(engine::sample_token(logits.data(), 4, all, u) == token, "u " << u);
  // 1000 equal logits in 256 chunks of 3 or 4: u = 0.5 passes the running sum (exact
  // integers) at token 500, and top_k = vocab is untruncated too.
  const std::vector<float> flat(1000, 0.25f);
  BOOST_TEST(engine::sample_token(flat.data(), 1000, all, 0.5) == 500);
  BOOST_TEST(engine::sample_token(flat.data(), 1000, {.temperature = 0.5, .top_k = 1000, .top_p = 1.0}, 0.2995) == 299);
}

BOOST_AUTO_TEST_CASE(generation_is_deterministic_and_survives_a_full_context) {
  nn::GPT model({.n_layer = 1, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 19, .init_seed = 3});
  const SamplingOptions o{.temperature = 1.0, .top_k = 0, .top_p = 1.0, .max_new_tokens = 20, .seed = 4};
  const std::vector<int32_t> a = engine::generate(model, {1, 2, 3}, o);
  const std::vector<int32_t> b = engine::generate(model, {1, 2, 3}, o);
  BOOST_TEST(a.size() == 20u);  // 3 + 20 > seq_len 8: the cache was rebuilt on the way
  BOOST_TEST(a == b);
  for (int32_t t : a) BOOST_TEST((t >= 0 && t < 19));
}

BOOST_AUTO_TEST_CASE(greedy_generation_matches_full_recomputation) {
  nn::GPT model({.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 16, .vocab_size = 19, .init_seed = 8});
  const std::vector<int32_t> prompt = {4, 7};
  const std::vector<int32_t> fast = engine::generate(model, prompt, {.temperature = 0.0, .max_new_tokens = 10});
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  NoGradGuard no_grad;
  model.eval();
  for (int i = 0; i < 10; ++i) {
    const Tensor logits = model(Tensor::from_vector(seq, {1, int64_t(seq.size())}));
    const std::vector<float> last = ops::select(ops::select(logits, 0, 0), 0, -1).to_vector<float>();
    seq.push_back(std::max_element(last.begin(), last.end()) - last.begin());
  }
  BOOST_TEST(std::vector<int32_t>(seq.begin() + 2, seq.end()) == fast, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_options_are_rejected) {
  nn::GPT model({.n_layer = 1, .n_head = 1, .d_model = 8, .seq_len = 8, .vocab_size = 5});
  BOOST_CHECK_THROW(engine::generate(model, {1}, {.temperature = -1.0}), Error);
  BOOST_CHECK_THROW(engine::generate(model, {1}, {.top_p = 0.0}), Error);
  BOOST_CHECK_THROW(engine::generate(model, {}, {}), Error);
}

BOOST_AUTO_TEST_SUITE_END()  // test_generate
