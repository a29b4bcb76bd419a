// The whole GPT against PyTorch (tests/reference/gpt_reference.py): logits, loss, every
// parameter gradient, and 10 clipped AdamW steps, from the same float32 weights.
#define BOOST_TEST_MODULE gpt_reference
#include <boost/test/unit_test.hpp>

#include "io/tensor_file.h"
#include "support/check.h"
#include "triad.h"

using namespace triad;

namespace {

struct Reference {
  std::string path = test::data_path("gpt_reference.tns");
  io::NamedTensors data = io::read_tensor_file(path);
  const Tensor& operator[](const std::string& name) const { return io::find_tensor(data, name, path); }
};

std::shared_ptr<nn::GPT> load_model(const Reference& ref) {
  const std::vector<int64_t> c = ref["config"].to_vector<int64_t>();  // L, NH, C, V, seq, B, T
  nn::GPTConfig config;
  config.n_layer = c[0];
  config.n_head = c[1];
  config.d_model = c[2];
  config.vocab_size = c[3];
  config.seq_len = c[4];
  auto model = std::make_shared<nn::GPT>(config);
  for (auto& [name, p] : model->named_parameters()) ops::copy_(p, ref["param/" + name]);
  return model;
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_and_gradients_match_pytorch) {
  Reference ref;
  auto model = load_model(ref);
  const Tensor logits = (*model)(ref["idx"]);
  BOOST_TEST(test::relative_error(logits, ref["logits"]) < 1e-5);
  const Tensor loss = cross_entropy(logits, ref["targets"]);
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
  optim::AdamW opt(optim::decay_groups(model->parameters(), 0.1),
                   {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
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

BOOST_AUTO_TEST_CASE(activation_checkpointing_gives_the_same_gradients) {
  Reference ref;
  auto plain = load_model(ref);
  backward(plain->loss(ref["idx"], ref["targets"]));
  const std::vector<int64_t> c = ref["config"].to_vector<int64_t>();
  nn::GPTConfig config{.n_layer = c[0],
                       .n_head = c[1],
                       .d_model = c[2],
                       .seq_len = c[4],
                       .vocab_size = c[3],
                       .activation_checkpointing = true};
  nn::GPT ckpt(config);
  auto pp = plain->named_parameters(), cp = ckpt.named_parameters();
  for (size_t i = 0; i < pp.size(); ++i) ops::copy_(cp[i].second, pp[i].second);
  backward(ckpt.loss(ref["idx"], ref["targets"]));
  for (size_t i = 0; i < pp.size(); ++i)
    BOOST_TEST(test::max_abs_diff(grad(cp[i].second), grad(pp[i].second)) == 0.0, pp[i].first);
}
