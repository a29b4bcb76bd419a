// A padded vocabulary (GPTConfig::vocab_multiple, Megatron's make-vocab-size-divisible-by)
// on one process: the token table holds vocab_size rows rounded up, the padding rows start
// at zero and never receive a gradient, and loss, gradients and samples equal the unpadded
// model's.
#include <boost/test/unit_test.hpp>

#include "engine/generate.h"
#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_vocab_padding)

using namespace triad;

namespace {

nn::GPTConfig config(int64_t multiple) {
  return {.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 37, .vocab_multiple = multiple,
          .init_seed = 3};
}

Tensor tokens(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor u = Tensor::empty({rows, cols});
  Generator g(seed);
  ops::uniform_(u, 0.0, 36.999, g);
  const std::vector<float> f = u.to_vector<float>();
  return Tensor::from_vector(std::vector<int64_t>(f.begin(), f.end()), {rows, cols});
}

}  // namespace

BOOST_AUTO_TEST_CASE(padding_rows_change_nothing) {
  nn::GPT plain(config(1)), padded(config(64));
  BOOST_TEST((plain.wte->weight.shape() == Shape{37, 16}));
  BOOST_TEST((padded.wte->weight.shape() == Shape{64, 16}));
  BOOST_TEST((config(64).parameter_sizes().front().second == 64 * 16));
  // The same initial values in the vocabulary's rows; zero padding, recorded as a split of
  // the global (37, 16) table.
  BOOST_TEST(test::max_abs_diff(ops::narrow(padded.wte->weight, 0, 0, 37), plain.wte->weight) == 0.0);
  BOOST_TEST(ops::max_abs(ops::narrow(padded.wte->weight, 0, 37, 27)) == 0.0);
  const nn::TensorSplit split = padded.named_splits().front().second;
  BOOST_TEST((split.global_shape(padded.wte->weight.shape()) == Shape{37, 16}));

  const Tensor x = tokens(3, 8, 1), y = tokens(3, 8, 2);
  BOOST_TEST(padded(x).size(-1) == 64);
  const Tensor lp = plain.loss(x, y), lq = padded.loss(x, y);
  BOOST_TEST(std::abs(lq.item() - lp.item()) <= 1e-6 * lp.item());
  backward(lp);
  backward(lq);
  const auto gp = plain.named_parameters(), gq = padded.named_parameters();
  for (size_t i = 0; i < gp.size(); ++i) {
    Tensor g = grad(gq[i].second);
    if (i == 0) {
      BOOST_TEST(ops::max_abs(ops::narrow(g, 0, 37, 27)) == 0.0, "padding rows' gradient");
      g = ops::narrow(g, 0, 0, 37);
    }
    BOOST_TEST(test::max_abs_diff(g, grad(gp[i].second)) <= 1e-6, gp[i].first);
  }
}

BOOST_AUTO_TEST_CASE(padding_rows_are_never_sampled) {
  nn::GPT plain(config(1)), padded(config(64));
  // Greedy picks the argmax of the padded logits' vocabulary columns only: the padding's
  // logits are 0 and can exceed every real one, so this also checks they are cut off.
  for (double temperature : {0.0, 1.0}) {
    const engine::SamplingOptions o{.temperature = temperature, .top_k = 0, .top_p = 1.0, .max_new_tokens = 12, .seed = 5};
    BOOST_TEST(engine::generate(padded, {1, 2, 3}, o) == engine::generate(plain, {1, 2, 3}, o),
               boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_vocab_padding
