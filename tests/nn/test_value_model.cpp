// nn::ValueModel (the reward model and critic of RLHF): its values are the final-normed
// hidden states times the head's weights, token by token; a left-padded row gives the
// values of the row alone; the head's gradient is the closed form sum_t g_t h_t; names
// and the head's initialization; a Llama base without its output head.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "nn/gpt.h"
#include "nn/llama.h"
#include "nn/value_model.h"
#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_value_model)

using namespace triad;

namespace {

const nn::GPTConfig kGpt{.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 12, .vocab_size = 29, .init_seed = 3};
const nn::LlamaConfig kLlama{.n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16, .intermediate = 24,
                             .seq_len = 12, .vocab_size = 29, .init_seed = 3};

Tensor tokens(const std::vector<int64_t>& v, int64_t rows) {
  return Tensor::from_vector(v, {rows, int64_t(v.size()) / rows});
}

void check_values_are_hidden_states_times_head(std::shared_ptr<nn::LanguageModel> base) {
  nn::ValueModel m(base, 16, *nn::serial(), 9);
  const Tensor x = tokens({1, 5, 7, 2, 28, 0, 3, 3, 9, 11, 4, 6}, 2);
  const Tensor v = m.forward(x);
  BOOST_TEST(v.shape() == Shape({2, 6}), shape_str(v.shape()));
  const std::vector<float> h = ops::contiguous(base->hidden_states(x)).to_vector<float>();  // (2, 6, 16)
  const std::vector<float> w = m.v_head->weight.to_vector<float>();                         // (1, 16)
  const std::vector<float> got = v.to_vector<float>();
  for (size_t t = 0; t < 12; ++t) {
    double want = 0;
    for (size_t c = 0; c < 16; ++c) want += double(h[t * 16 + c]) * double(w[c]);
    BOOST_TEST(std::abs(got[t] - want) < 1e-5, "token " << t);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(values_are_hidden_states_times_the_head_gpt) {
  check_values_are_hidden_states_times_head(std::make_shared<nn::GPT>(kGpt));
}

BOOST_AUTO_TEST_CASE(values_are_hidden_states_times_the_head_llama) {
  check_values_are_hidden_states_times_head(std::make_shared<nn::Llama>(kLlama));
}

// A Llama built without its output head (a value model's base) holds the whole model's other
// parameters with the same values and gives the same hidden states; its logits are an error.
BOOST_AUTO_TEST_CASE(a_llama_without_its_head_is_the_same_base) {
  const auto whole = std::make_shared<nn::Llama>(kLlama);
  const auto base = std::make_shared<nn::Llama>(kLlama, nn::serial(), /*with_head=*/false);
  const auto wp = whole->named_parameters(), bp = base->named_parameters();
  BOOST_TEST_REQUIRE(bp.size() + 1 == wp.size());
  BOOST_TEST(wp.back().first == "head.weight");
  for (size_t i = 0; i < bp.size(); ++i) {
    BOOST_TEST(bp[i].first == wp[i].first);
    BOOST_TEST(test::max_abs_diff(bp[i].second, wp[i].second) == 0.0, bp[i].first);
  }
  const Tensor x = tokens({1, 5, 7, 2, 28, 0, 3, 3}, 2);
  BOOST_TEST(test::max_abs_diff(base->hidden_states(x), whole->hidden_states(x)) == 0.0);
  test::check_error([&] { (*base)(x); }, {"Llama", "without its output head"});
  test::check_error([&] { base->loss(x, x); }, {"Llama", "without its output head"});
}

BOOST_AUTO_TEST_CASE(left_padded_rows_give_the_values_of_the_row_alone) {
  nn::ValueModel m(std::make_shared<nn::GPT>(kGpt), 16, *nn::serial(), 9);
  // Row 1 is row 0's last three tokens behind three pad columns (pads hold any token).
  const Tensor batch = tokens({4, 8, 15, 16, 23, 2, 1, 1, 1, 15, 16, 23}, 2);
  const Tensor v = m.forward(batch, nn::left_padding({0, 3}, 6));
  const Tensor alone = m.forward(tokens({15, 16, 23}, 1));
  BOOST_TEST(test::max_abs_diff(ops::narrow(ops::select(v, 0, 1), 0, 3, 3), ops::select(alone, 0, 0)) < 1e-5);
}

BOOST_AUTO_TEST_CASE(head_gradient_is_the_closed_form) {
  auto base = std::make_shared<nn::GPT>(kGpt);
  nn::ValueModel m(base, 16, *nn::serial(), 9);
  const Tensor x = tokens({1, 5, 7, 2, 28, 0, 3, 3}, 2);
  // loss = sum_t g_t v_t with fixed g: d loss / d w = sum_t g_t h_t.
  const Tensor g = Tensor::from_vector(std::vector<float>{0.5f, -1.f, 2.f, 0.25f, -0.75f, 1.5f, 1.f, -2.f}, {2, 4});
  backward(sum(mul(m.forward(x), g)));
  const std::vector<float> h = ops::contiguous(base->hidden_states(x)).to_vector<float>();
  const std::vector<float> gv = g.to_vector<float>(), grad = triad::grad(m.v_head->weight).to_vector<float>();
  for (size_t c = 0; c < 16; ++c) {
    double want = 0;
    for (size_t t = 0; t < 8; ++t) want += double(gv[t]) * double(h[t * 16 + c]);
    BOOST_TEST(std::abs(grad[c] - want) < 1e-5, "channel " << c);
  }
}

BOOST_AUTO_TEST_CASE(names_and_head_initialization) {
  nn::ValueModel a(std::make_shared<nn::GPT>(kGpt), 16, *nn::serial(), 9);
  nn::ValueModel b(std::make_shared<nn::GPT>(kGpt), 16, *nn::serial(), 9);
  nn::ValueModel c(std::make_shared<nn::GPT>(kGpt), 16, *nn::serial(), 10);
  const auto params = a.named_parameters();
  BOOST_TEST(params.back().first == "v_head.weight");
  BOOST_TEST(params.back().second.shape() == Shape({1, 16}));
  for (size_t i = 0; i + 1 < params.size(); ++i) BOOST_TEST(params[i].first.rfind("base.", 0) == 0, params[i].first);
  BOOST_TEST(test::max_abs_diff(a.v_head->weight, b.v_head->weight) == 0.0);  // seeded
  BOOST_TEST(test::max_abs_diff(a.v_head->weight, c.v_head->weight) > 0.0);
  BOOST_TEST(ops::max_abs(a.v_head->weight) <= 1.0 / std::sqrt(16.0));  // torch's Linear: U(±1/sqrt(fan_in))
  BOOST_TEST(ops::max_abs(a.v_head->weight) > 0.5 / std::sqrt(16.0));
}

BOOST_AUTO_TEST_SUITE_END()  // test_value_model
