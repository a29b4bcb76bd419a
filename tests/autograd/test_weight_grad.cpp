// Note [Split backward]: a backward under DeferWeightGrads leaves the linear weights'
// gradients in the queue and every other gradient in place; running the queue then gives
// exactly (bit for bit) the gradients of the plain backward, hooks included.
#include <boost/test/unit_test.hpp>
#include <map>

#include "autograd/weight_grad.h"
#include "support/check.h"
#include "triad.h"

using namespace triad;

namespace {

const nn::GPTConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 32, .init_seed = 3};

Tensor tokens(uint64_t seed) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 2 * 8; ++i) ids.push_back(int64_t(random_bits(seed, uint64_t(i)) % 32));
  return Tensor::from_vector(ids, {2, 8});
}

std::map<std::string, Tensor> grads_of(nn::Module& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : m.named_parameters())
    if (grad(p).defined()) out[name] = ops::clone(grad(p));
  return out;
}

bool is_linear_weight(const std::string& name) {
  return name.find("qkv") != std::string::npos || name.find("proj") != std::string::npos ||
         name.find("fc") != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(deferred_weight_gradients_equal_the_plain_ones) {
  for (bool checkpointing : {false, true}) {
    nn::GPTConfig c = kModel;
    c.activation_checkpointing = checkpointing;
    nn::GPT plain(c), split(c);
    for (int micro = 0; micro < 2; ++micro) backward(plain.loss(tokens(micro), tokens(10 + micro)));
    const auto expected = grads_of(plain);

    std::map<std::string, int> accumulated;
    for (const auto& [name, p] : split.named_parameters())
      register_post_accumulate_grad_hook(p, [&accumulated, name = name](const Tensor&) { ++accumulated[name]; });
    WeightGradQueue first, second;
    {
      DeferWeightGrads defer(first);
      backward(split.loss(tokens(0), tokens(10)));
    }
    // After B: LayerNorms, the position table, fc's bias (summed in GELU's fused backward)
    // and the tied token table (the fused classifier makes the head's weight gradient in B,
    // with each chunk's recomputed logits: Note [Fused classifier]) have gradients; the
    // other linear weights and biases wait.
    BOOST_TEST(!first.empty());
    for (const auto& [name, p] : split.named_parameters()) {
      if (name.ends_with("mlp.fc.bias") || name == "wte.weight") {
        BOOST_TEST(grad(p).defined(), name);
        continue;
      }
      const bool waits = is_linear_weight(name) || (name.ends_with(".bias") && name.find("ln") == std::string::npos);
      BOOST_TEST(grad(p).defined() == !waits, name);
    }
    {
      DeferWeightGrads defer(second);
      backward(split.loss(tokens(1), tokens(11)));
    }
    first.run();
    second.run();
    BOOST_TEST(first.empty());
    const auto got = grads_of(split);
    BOOST_TEST(got.size() == expected.size());
    for (const auto& [name, g] : expected) {
      BOOST_REQUIRE_MESSAGE(got.count(name), name);
      // The same sums, in the same order for each gradient but the token table, whose
      // lookup and head contributions arrive in another order: equal up to rounding.
      const double err = test::max_abs_diff(got.at(name), g);
      if (name == "wte.weight")
        BOOST_TEST(err <= 1e-6 * ops::max_abs(g), name);
      else
        BOOST_TEST(err == 0.0, name << " checkpointing " << checkpointing);
    }
    // Every parameter's hook fired once per pass: the token table's lookup and head
    // gradients both arrive in B, summed before they reach it.
    for (const auto& [name, n] : accumulated) BOOST_TEST(n == 2, name);
  }
}

BOOST_AUTO_TEST_CASE(a_queue_never_run_leaves_no_weight_gradient) {
  nn::GPT model(kModel);
  WeightGradQueue queue;
  {
    DeferWeightGrads defer(queue);
    backward(model.loss(tokens(0), tokens(1)));
  }
  BOOST_TEST(!grad(model.blocks->operator[](0)->named_parameters()[2].second).defined());  // attn.qkv.weight
  WeightGradQueue empty;
  empty.run();
  BOOST_TEST(empty.empty());
}
