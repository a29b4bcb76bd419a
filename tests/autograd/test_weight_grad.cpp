// Note [Split backward]: a backward under DeferWeightGrads leaves the linear weights'
// gradients in the queue and every other gradient in place; running the queue then gives
// exactly (bit for bit) the gradients of the plain backward, hooks included; and Note
// [Gradients added in place]: weight gradients added into the .grad a leaf already has.
#include <boost/test/unit_test.hpp>
#include <map>
#include <optional>

#include "autograd/fused_classifier.h"
#include "autograd/weight_grad.h"
#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_weight_grad)

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

namespace {

// A leaf of `shape` and dtype dt with values uniform in [-1, 1).
Tensor wg_random(const Shape& shape, DType dt, uint64_t seed, bool leaf) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  ops::uniform_(t, -1, 1, gen);
  t = ops::to(t, dt);
  if (leaf) set_requires_grad(t);
  return t;
}

// d/dw of sum(c * linear(x, w)): c^T x, made in f32 (f64 for f64 operands).
Tensor wg_expected(const Tensor& x, const Tensor& c) {
  const DType wide = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  return ops::matmul(ops::to(c, wide), ops::to(x, wide), true, false);
}

}  // namespace

// Note [Gradients added in place]: a later pass adds a linear's (and the fused
// classifier's) weight gradient into the .grad it finds, which keeps its storage; the sum
// is the returned gradient's up to order, a bf16 .grad is rounded once, hooks still run
// once per pass, and a gradient hook (which must see the gradient) turns the in-place sum
// off.
BOOST_AUTO_TEST_CASE(weight_gradients_are_added_into_an_existing_grad) {
  for (DType dt : {DType::f32, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      const Tensor w = wg_random({5, 7}, dt, 1, true);
      const Tensor x1 = wg_random({6, 7}, dt, 2, false), c1 = wg_random({6, 5}, dt, 3, false);
      const Tensor x2 = wg_random({6, 7}, dt, 4, false), c2 = wg_random({6, 5}, dt, 5, false);
      int fired = 0;
      register_post_accumulate_grad_hook(w, [&](const Tensor&) { ++fired; });
      backward(sum(mul(linear(x1, w), c1)));
      const Tensor first = ops::clone(grad(w));
      BOOST_TEST(test::max_abs_diff(first, ops::to(wg_expected(x1, c1), dt)) == 0.0);
      const void* storage = grad(w).raw_data();
      backward(sum(mul(linear(x2, w), c2)));
      BOOST_TEST(grad(w).raw_data() == storage);  // added in place
      BOOST_TEST(fired == 2);
      // The f32 sum of the first .grad and the second product, rounded once to dt.
      const Tensor want = ops::to(ops::add(ops::to(first, DType::f32), wg_expected(x2, c2)), dt);
      const double ulps = dt == DType::f32 ? 4 * 0x1p-23 : 0x1p-8;
      BOOST_TEST(test::relative_error(grad(w), want) <= ulps);
      if (dt == DType::bf16) {  // exactly: the f32 composition made by the op itself, rounded once
        const Tensor wide = ops::to(first, DType::f32);
        ops::add_matmul_(wide, ops::to(c2, DType::f32), ops::to(x2, DType::f32), true, false);
        BOOST_TEST(test::max_abs_diff(grad(w), ops::to(wide, dt)) == 0.0);
      }
    }
  }
  // A gradient hook sees each pass's gradient whole: doubled, then added.
  const Tensor w = wg_random({5, 7}, DType::f32, 1, true);
  const Tensor x = wg_random({6, 7}, DType::f32, 2, false), c = wg_random({6, 5}, DType::f32, 3, false);
  register_hook(w, [](const Tensor& g) { return ops::mul(g, 2.0); });
  for (int pass = 0; pass < 2; ++pass) backward(sum(mul(linear(x, w), c)));
  BOOST_TEST(test::relative_error(grad(w), ops::mul(wg_expected(x, c), 4.0)) <= 0x1p-22);
}

// ZeRO's shape: a pre-accumulate hook points .grad into a zeroed flat buffer before the
// first gradient lands; the linear's and the fused classifier's weight gradients go into
// it in place, in the plain backward and from the split-backward queue, and the sums
// equal the gradients returned to a leaf without the hook.
BOOST_AUTO_TEST_CASE(a_pre_accumulate_hook_gives_the_buffer_gradients_are_added_into) {
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, 4, 0, 2, 3, 4}, {6});
  const auto loss = [&](const Tensor& w, const Tensor& head, uint64_t seed) {
    const Tensor h = linear(wg_random({6, 7}, DType::f32, seed, false), w);
    return linear_cross_entropy(h, head, targets, -100, {}, 4);
  };
  const Tensor w_ref = wg_random({5, 7}, DType::f32, 1, true), head_ref = wg_random({5, 5}, DType::f32, 2, true);
  for (uint64_t pass = 0; pass < 2; ++pass) backward(loss(w_ref, head_ref, 10 + pass));
  for (bool split : {false, true}) {
    BOOST_TEST_CONTEXT((split ? "split backward" : "plain backward")) {
      const Tensor w = wg_random({5, 7}, DType::f32, 1, true), head = wg_random({5, 5}, DType::f32, 2, true);
      const Tensor flat = Tensor::zeros({60});
      std::map<const void*, int> fired;
      for (const auto& [p, offset] : {std::pair(w, 0), std::pair(head, 35)}) {
        register_pre_accumulate_grad_hook(p, [flat, offset](const Tensor& leaf) {
          if (!grad(leaf).defined())
            set_grad(leaf, ops::view(ops::narrow(flat, 0, offset, leaf.numel()), leaf.shape()));
        });
        register_post_accumulate_grad_hook(p, [&fired](const Tensor& leaf) { ++fired[leaf.raw_data()]; });
      }
      for (uint64_t pass = 0; pass < 2; ++pass) {
        WeightGradQueue queue;
        {
          std::optional<DeferWeightGrads> defer;
          if (split) defer.emplace(queue);
          backward(loss(w, head, 10 + pass));
        }
        queue.run();
      }
      BOOST_TEST(grad(w).raw_data() == flat.raw_data());
      BOOST_TEST(grad(head).storage() == flat.storage());
      BOOST_TEST(test::relative_error(grad(w), grad(w_ref)) <= 4 * 0x1p-23);
      BOOST_TEST(test::relative_error(grad(head), grad(head_ref)) <= 4 * 0x1p-23);
      BOOST_TEST(fired[w.raw_data()] == 2);
      BOOST_TEST(fired[head.raw_data()] == 2);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_weight_grad
