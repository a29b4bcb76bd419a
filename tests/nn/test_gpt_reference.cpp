// The whole GPT against PyTorch (tests/reference/gpt_reference.py): logits, loss, every
// parameter gradient, and 10 clipped AdamW steps, from the same float32 weights.
#include <boost/test/unit_test.hpp>

#include "support/check.h"
#include "support/language_model_reference.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_gpt_reference)

using namespace triad;

namespace {

nn::GPTConfig reference_config(const test::ReferenceFile& ref) {
  const std::vector<int64_t> c = ref["config"].to_vector<int64_t>();  // L, NH, C, V, seq, B, T
  return {.n_layer = c[0], .n_head = c[1], .d_model = c[2], .seq_len = c[4], .vocab_size = c[3]};
}

std::shared_ptr<nn::GPT> load_model(const test::ReferenceFile& ref) {
  auto model = std::make_shared<nn::GPT>(reference_config(ref));
  test::load_reference_parameters(*model, ref);
  return model;
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_and_gradients_match_pytorch) {
  const test::ReferenceFile ref("gpt_reference.tns");
  test::check_forward_and_gradients(*load_model(ref), ref);
}

BOOST_AUTO_TEST_CASE(adamw_trajectory_matches_pytorch) {
  const test::ReferenceFile ref("gpt_reference.tns");
  test::check_adamw_trajectory(*load_model(ref), ref);
}

BOOST_AUTO_TEST_CASE(activation_checkpointing_gives_the_same_gradients) {
  const test::ReferenceFile ref("gpt_reference.tns");
  auto plain = load_model(ref);
  backward(plain->loss(ref["idx"], ref["targets"]));
  nn::GPTConfig config = reference_config(ref);
  config.activation_checkpointing = true;
  nn::GPT ckpt(config);
  auto pp = plain->named_parameters(), cp = ckpt.named_parameters();
  for (size_t i = 0; i < pp.size(); ++i) ops::copy_(cp[i].second, pp[i].second);
  backward(ckpt.loss(ref["idx"], ref["targets"]));
  for (size_t i = 0; i < pp.size(); ++i)
    BOOST_TEST(test::max_abs_diff(grad(cp[i].second), grad(pp[i].second)) == 0.0, pp[i].first);
}

BOOST_AUTO_TEST_SUITE_END()  // test_gpt_reference
