// The Llama's layers against closed forms: RMSNorm's values, SiLU's values and its finite
// gradient far out in the tail, rotary positions as rotations that make q·k depend on the
// positions' difference alone, grouped-query attention as multi-head attention with each
// key/value head repeated for its group (Hugging Face's repeat_kv), the layer list as the
// same model as nn::Llama, and the configuration's parameter count and errors.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_llama_layers)

using namespace triad;

BOOST_AUTO_TEST_CASE(rms_norm_divides_by_the_root_mean_square) {
  const Tensor x = Tensor::from_vector(std::vector<float>{3, 4, 0, -2}, {2, 2});
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  const Tensor y = rms_norm(x, w, 1e-5);
  const double r0 = std::sqrt(12.5 + 1e-5), r1 = std::sqrt(2.0 + 1e-5);  // mean(x^2) = 12.5, 2
  BOOST_TEST(y.at({0, 0}) == 3 / r0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(y.at({0, 1}) == 8 / r0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(y.at({1, 0}) == 0.0);
  BOOST_TEST(y.at({1, 1}) == -4 / r1, boost::test_tools::tolerance(1e-6));
  test::check_error([&] { rms_norm(x, Tensor::ones({3})); }, {"rms_norm", "does not match"});
}

BOOST_AUTO_TEST_CASE(silu_is_x_times_sigmoid_and_finite_in_the_tails) {
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, -2, -200, 200}, {5});
  set_requires_grad(x);
  const Tensor y = silu(x);
  BOOST_TEST(y.at({0}) == 0.0);
  BOOST_TEST(y.at({1}) == 1 / (1 + std::exp(-1.0)), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(y.at({2}) == -2 / (1 + std::exp(2.0)), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(std::abs(y.at({3})) < 1e-30);
  BOOST_TEST(y.at({4}) == 200.0);
  backward(sum(y));
  const Tensor g = grad(x);  // s (1 + x (1 - s)), s = sigmoid(x)
  BOOST_TEST(g.at({0}) == 0.5, boost::test_tools::tolerance(1e-6));
  const double s = 1 / (1 + std::exp(-1.0));
  BOOST_TEST(g.at({1}) == s * (1 + (1 - s)), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(std::abs(g.at({3})) < 1e-30);
  BOOST_TEST(g.at({4}) == 1.0);
}

BOOST_AUTO_TEST_CASE(rotary_positions_rotate_feature_pairs) {
  // D = 4, theta = 100: pair (0, 2) turns by p radians, pair (1, 3) by p / 10.
  const nn::RotaryEmbedding rope(4, 8, 100.0);
  const Tensor e0 = Tensor::from_vector(std::vector<float>{1, 0, 0, 0}, {1, 4});
  const Tensor e1 = Tensor::from_vector(std::vector<float>{0, 1, 0, 0}, {1, 4});
  for (int64_t p : {0, 3, 7}) {
    const Tensor a = rope.apply(e0, p), b = rope.apply(e1, p);
    BOOST_TEST(a.at({0, 0}) == std::cos(double(p)), boost::test_tools::tolerance(1e-6));
    BOOST_TEST(a.at({0, 2}) == std::sin(double(p)), boost::test_tools::tolerance(1e-6));
    BOOST_TEST(a.at({0, 1}) == 0.0);
    BOOST_TEST(b.at({0, 1}) == std::cos(p / 10.0), boost::test_tools::tolerance(1e-6));
    BOOST_TEST(b.at({0, 3}) == std::sin(p / 10.0), boost::test_tools::tolerance(1e-6));
  }
  test::check_error([&] { rope.apply(Tensor::zeros({2, 4}), 7); }, {"RotaryEmbedding", "exceed"});
}

BOOST_AUTO_TEST_CASE(rotated_dot_products_depend_on_the_offset_only) {
  const nn::RotaryEmbedding rope(8, 16);
  Tensor q = Tensor::empty({1, 8}), k = Tensor::empty({1, 8});
  Generator gen(3);
  ops::normal_(q, 0.0, 1.0, gen);
  ops::normal_(k, 0.0, 1.0, gen);
  auto dot = [&](int64_t pq, int64_t pk) { return ops::sum(ops::mul(rope.apply(q, pq), rope.apply(k, pk))).item(); };
  BOOST_TEST(dot(5, 2) == dot(12, 9), boost::test_tools::tolerance(1e-5));
  BOOST_TEST(dot(3, 3) == ops::sum(ops::mul(q, k)).item(), boost::test_tools::tolerance(1e-5));
  BOOST_TEST(std::abs(dot(5, 2) - dot(5, 3)) > 1e-3);  // the offset matters
}

BOOST_AUTO_TEST_CASE(grouped_query_attention_is_attention_with_repeated_kv_heads) {
  // 4 query heads over 2 key/value heads equal 4 heads whose k and v weights repeat each
  // key/value head for query heads 2j and 2j + 1.
  const int64_t C = 16, hd = 4;
  const auto rope = std::make_shared<const nn::RotaryEmbedding>(hd, 8);
  nn::GroupedQueryAttention gqa(C, 4, 2, rope), mha(C, 4, 4, rope);
  for (auto* lin : {gqa.q.get(), gqa.k.get(), gqa.v.get(), gqa.o.get()}) ops::mul_(lin->weight, 4.0);  // sharp attention
  ops::copy_(mha.q->weight, gqa.q->weight);
  ops::copy_(mha.o->weight, gqa.o->weight);
  for (int64_t h = 0; h < 4; ++h) {
    ops::copy_(ops::narrow(mha.k->weight, 0, h * hd, hd), ops::narrow(gqa.k->weight, 0, (h / 2) * hd, hd));
    ops::copy_(ops::narrow(mha.v->weight, 0, h * hd, hd), ops::narrow(gqa.v->weight, 0, (h / 2) * hd, hd));
  }
  Tensor x = Tensor::empty({2, 6, C});
  Generator gen(9);
  ops::normal_(x, 0.0, 1.0, gen);
  BOOST_TEST(gqa.k->weight.size(0) == 2 * hd);
  BOOST_TEST(test::max_abs_diff(gqa(x), mha(x)) < 1e-5);
}

BOOST_AUTO_TEST_CASE(layer_list_is_the_same_model) {
  const nn::LlamaConfig config{.n_layer = 3, .vocab_size = 64, .init_seed = 11};
  nn::Llama model(config);
  const nn::LayerList list = nn::llama_layers(config);
  nn::PipelineStage stage(list, {{0, int(list.layers.size())}});
  list.init(stage);
  const auto a = model.named_parameters(), b = stage.named_parameters();
  BOOST_REQUIRE(a.size() == b.size());
  const auto shapes = config.parameter_shapes();
  BOOST_REQUIRE(shapes.size() == a.size());
  int64_t total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST(a[i].first == b[i].first);
    BOOST_TEST(a[i].first == shapes[i].first);
    BOOST_TEST(a[i].second.shape() == shapes[i].second, a[i].first);
    BOOST_TEST(test::max_abs_diff(a[i].second, b[i].second) == 0.0, a[i].first);
    total += a[i].second.numel();
  }
  BOOST_TEST(total == config.num_parameters());
  BOOST_TEST(model.num_parameters() == config.num_parameters());
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 63, 0, 7, 7}, {2, 4});
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{5, 9, 2, -100, 0, 7, 7, 1}, {2, 4});
  BOOST_TEST(model.loss(ids, targets).item() == list.loss(stage(ids), targets).item(),
             boost::test_tools::tolerance(1e-6));
  // The list's loss fused with its head (Note [Fused head loss]): the same loss and gradients.
  const Tensor fused = stage.forward_loss(0, ids, targets);
  backward(fused);
  std::vector<Tensor> fused_grads;
  for (const auto& [name, p] : stage.named_parameters()) fused_grads.push_back(ops::clone(grad(p)));
  stage.zero_grad();
  const Tensor whole = list.loss(stage(ids), targets);
  backward(whole);
  BOOST_TEST(fused.item() == whole.item(), boost::test_tools::tolerance(1e-6));
  const auto params = stage.named_parameters();
  for (size_t i = 0; i < params.size(); ++i)
    BOOST_TEST(test::max_abs_diff(fused_grads[i], grad(params[i].second)) < 1e-6, params[i].first);
}

BOOST_AUTO_TEST_CASE(parameter_count_formula) {
  // 2VC + L(2C + 2C^2 + 2C·NKV·hd + 3CI) + C for TinyLlama-1.1B: 1,100,048,384.
  BOOST_TEST(nn::LlamaConfig::preset("tinyllama-1.1b").num_parameters() == 1100048384);
  BOOST_TEST(nn::LlamaConfig::preset("llama2-7b").num_parameters() == 6738415616);
  test::check_error([] { nn::LlamaConfig::preset("llama-huge"); }, {"llama-tiny", "tinyllama-1.1b"});
}

BOOST_AUTO_TEST_CASE(bad_shapes_are_named) {
  test::check_error([] { nn::Llama({.n_head = 4, .n_kv_head = 3}); }, {"n_kv_head", "divisor of n_head"});
  test::check_error([] { nn::Llama({.n_head = 4, .d_model = 12}); }, {"head dimension", "even"});
  test::check_error([] { nn::Llama({.intermediate = 0}); }, {"intermediate_size"});
  nn::Llama model({.seq_len = 8});
  test::check_error([&] { model(Tensor::zeros({1, 9}, DType::i64)); }, {"exceeds the model's seq_len 8"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_llama_layers
