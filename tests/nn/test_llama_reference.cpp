// The whole Llama against PyTorch (tests/reference/llama_reference.py): logits, loss, every
// parameter gradient, and 10 clipped AdamW steps, from the same float32 weights; and
// generation over the KV cache against the full forward of those weights.
#define BOOST_TEST_MODULE llama_reference
#include <boost/test/unit_test.hpp>

#include "io/tensor_file.h"
#include "support/check.h"
#include "triad.h"

using namespace triad;

namespace {

struct Reference {
  std::string path = test::data_path("llama_reference.tns");
  io::NamedTensors data = io::read_tensor_file(path);
  const Tensor& operator[](const std::string& name) const { return io::find_tensor(data, name, path); }
};

std::shared_ptr<nn::Llama> load_model(const Reference& ref) {
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
  for (auto& [name, p] : model->named_parameters()) ops::copy_(p, ref["param/" + name]);
  return model;
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_and_gradients_match_pytorch) {
  Reference ref;
  auto model = load_model(ref);
  BOOST_TEST(model->config().n_kv_head < model->config().n_head);
  const Tensor logits = (*model)(ref["idx"]);
  BOOST_TEST(test::relative_error(logits, ref["logits"]) < 1e-5);
  const Tensor loss = model->loss(ref["idx"], ref["targets"]);
  BOOST_TEST(std::fabs(loss.item() - ref["loss"].item()) / ref["loss"].item() < 1e-5);
  backward(loss);
  for (auto& [name, p] : model->named_parameters()) {
    BOOST_REQUIRE_MESSAGE(grad(p).defined(), name << " has no gradient");
    const double err = test::relative_error(grad(p), ref["grad/" + name]);
    BOOST_TEST(err < 1e-4, name << ": relative gradient error " << err);
  }
}

BOOST_AUTO_TEST_CASE(adamw_trajectory_matches_pytorch) {
  Reference ref;
  auto model = load_model(ref);
  optim::AdamW opt(optim::decay_groups(model->parameters(), 0.1), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  const std::vector<float> losses = ref["train/losses"].to_vector<float>();
  const std::vector<float> norms = ref["train/grad_norms"].to_vector<float>();
  for (size_t step = 0; step < losses.size(); ++step) {
    opt.zero_grad();
    const Tensor loss = model->loss(ref["idx"], ref["targets"]);
    backward(loss);
    const double norm = optim::clip_grad_norm(model->parameters(), 1.0);
    opt.step();
    BOOST_TEST(std::fabs(loss.item() - losses[step]) / losses[step] < 1e-5, "step " << step);
    BOOST_TEST(std::fabs(norm - norms[step]) / norms[step] < 1e-4, "step " << step);
  }
  for (auto& [name, p] : model->named_parameters()) {
    const double err = test::max_abs_diff(p, ref["final/" + name]);
    BOOST_TEST(err < 2e-5, name << ": final parameter differs by " << err);
  }
}

BOOST_AUTO_TEST_CASE(cached_generation_equals_the_full_forward) {
  Reference ref;
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
