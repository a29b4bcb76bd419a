// The whole Llama against PyTorch (tests/reference/llama_reference.py): logits, loss, every
// parameter gradient, and 10 clipped AdamW steps, from the same float32 weights; and
// generation over the KV cache against the full forward of those weights.
#include <boost/test/unit_test.hpp>

#include "support/check.h"
#include "support/language_model_reference.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_llama_reference)

using namespace triad;

namespace {

std::shared_ptr<nn::Llama> load_model(const test::ReferenceFile& ref) {
  const std::vector<int64_t> c = ref["config"].to_vector<int64_t>();  // L, NH, NKV, C, I, V, seq, B, T
  const std::vector<double> f = ref["config_f"].to_vector<double>();  // rms_eps, rope_theta
  auto model = std::make_shared<nn::Llama>(nn::LlamaConfig{.n_layer = c[0],
                                                           .n_head = c[1],
                                                           .n_kv_head = c[2],
                                                           .d_model = c[3],
                                                           .intermediate = c[4],
                                                           .seq_len = c[6],
                                                           .vocab_size = c[5],
                                                           .rms_eps = f[0],
                                                           .rope_theta = f[1]});
  test::load_reference_parameters(*model, ref);
  return model;
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_and_gradients_match_pytorch) {
  const test::ReferenceFile ref("llama_reference.tns");
  auto model = load_model(ref);
  BOOST_TEST(model->config().n_kv_head < model->config().n_head);
  test::check_forward_and_gradients(*model, ref);
}

BOOST_AUTO_TEST_CASE(adamw_trajectory_matches_pytorch) {
  const test::ReferenceFile ref("llama_reference.tns");
  test::check_adamw_trajectory(*load_model(ref), ref);
}

BOOST_AUTO_TEST_CASE(cached_generation_equals_the_full_forward) {
  const test::ReferenceFile ref("llama_reference.tns");
  auto model = load_model(ref);
  model->eval();
  const Tensor ids = ref["idx"];  // (B, T)
  const int64_t T = ids.size(1);
  const Tensor full = (*model)(ids);
  // A prompt of 5, then one token at a time, then the rest as one chunk.
  nn::KVCache cache = model->make_cache(ids.size(0));
  BOOST_TEST(cache.k[0].size(1) == model->config().n_kv_head);
  std::vector<Tensor> parts{model->forward_cached(ops::narrow(ids, 1, 0, 5), cache)};
  for (int64_t t = 5; t < 9; ++t) parts.push_back(model->forward_cached(ops::narrow(ids, 1, t, 1), cache));
  parts.push_back(model->forward_cached(ops::narrow(ids, 1, 9, T - 9), cache));
  BOOST_TEST(cache.length == T);
  BOOST_TEST(test::max_abs_diff(cat(parts, 1), full) < 1e-4);
  BOOST_TEST(test::relative_error(cat(parts, 1), ref["logits"]) < 1e-5);
  const Tensor too_many = Tensor::zeros({ids.size(0), model->config().seq_len - T + 1}, DType::i64);
  test::check_error([&] { model->forward_cached(too_many, cache); }, {"exceed the model's seq_len"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_llama_reference
