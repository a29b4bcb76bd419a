// Note [Activation bytes] against measurement: the CPU allocator counts the bytes of every
// live tensor exactly (the sizes asked for, tensor/allocator.h), so the bytes a forward
// leaves allocated are the bytes in use after it minus those before, less the output the
// caller holds. Each layer's formula must equal that to the byte: every term is a whole
// tensor the backward keeps, so there is nothing to round and any gap is a tensor the
// formula misses or invents. Shapes are small and every dimension distinct (B 3, T 10,
// C 24, NH 4, vocabulary 50 padded to 64), so a term in the wrong dimension shows.
#include <boost/test/unit_test.hpp>

#include "autograd/engine.h"
#include "autograd/meta.h"
#include "autograd/weight_grad.h"
#include "estimate/activation_bytes.h"
#include "nn/gpt.h"
#include "nn/gpt_layers.h"
#include "nn/transformer.h"
#include "support/activation_probe.h"
#include "support/check.h"
#include "tensor/allocator.h"
#include "tensor/ops.h"

BOOST_AUTO_TEST_SUITE(test_activation_bytes)

using namespace triad;

namespace {

constexpr int64_t B = 3, T = 10, C = 24, NH = 4;

double in_use() { return test::cpu_bytes_in_use(); }
using test::random_leaf;

nn::GPTConfig config(double dropout = 0.0) {
  return {.n_layer = 2,
          .n_head = NH,
          .d_model = C,
          .seq_len = T,
          .vocab_size = 50,
          .vocab_multiple = 16,
          .dropout = dropout};
}

estimate::ActivationShape shape(double dropout = 0.0) {
  return estimate::activation_shape(config(dropout), B, T, 1, false, DType::f32, false);
}

// Bytes a block's forward leaves for its backward, the input (which the block keeps) counted.
double measured_block_saved(double dropout) {
  nn::Block block(C, NH, dropout);
  block.train();
  const Tensor x = random_leaf({B, T, C}, 7);
  const double before = in_use();
  const Tensor y = block(x);
  return in_use() - before - double(y.nbytes()) + double(x.nbytes());
}

}  // namespace

BOOST_AUTO_TEST_CASE(block_formula_is_64_BTC_plus_statistics) {
  // By hand: 16 f32 (B, T, C) tensors, 4 f32 rows of statistics, one f32 (B, NH, T) lse.
  const double expected = 16.0 * 4 * B * T * C + 4.0 * 4 * B * T + 4.0 * B * NH * T;
  BOOST_TEST(estimate::block_activations(shape()).saved == expected);
  BOOST_TEST(expected == 47040.0);
}

BOOST_AUTO_TEST_CASE(block_saved_bytes_equal_the_allocators_count) {
  BOOST_TEST(measured_block_saved(0.0) == estimate::block_activations(shape()).saved);
}

BOOST_AUTO_TEST_CASE(block_with_attention_dropout_keeps_the_probabilities) {
  const double measured = measured_block_saved(0.1), formula = estimate::block_activations(shape(0.1)).saved;
  BOOST_TEST(measured == formula);
  // The (T, T) softmax and dropout outputs replace the fused kernel's lse, and the composed
  // output's copy in (B, T, C) order that proj keeps the fused output proj reads in place.
  BOOST_TEST(formula - estimate::block_activations(shape()).saved == 2.0 * 4 * B * NH * T * T - 4.0 * B * NH * T);
}

BOOST_AUTO_TEST_CASE(block_deferred_weight_gradients_hold_inputs_and_output_gradients) {
  nn::Block block(C, NH, 0.0);
  Tensor x = random_leaf({B, T, C}, 8);
  const double before = in_use();
  WeightGradQueue queue;
  {
    Tensor y = block(x);
    Tensor seed = Tensor::ones(y.shape());
    DeferWeightGrads defer(queue);
    backward(y, seed);
  }
  // What stays: the queue's tensors, x's gradient, the LayerNorms' (computed at once) and
  // fc's bias gradient (summed with GELU's backward in one kernel, so delivered at once).
  double grads = double(grad(x).nbytes());
  for (const auto& [name, p] : block.named_parameters())
    if (grad(p).defined()) grads += double(grad(p).nbytes());
  BOOST_TEST(grads == double(B * T * C * 4 + 4 * C * 4 + 4 * C * 4));
  BOOST_TEST(in_use() - before - grads == estimate::block_activations(shape()).deferred);
  // Four linears' inputs (C, C, C, 4C wide) and output gradients (3C, C, 4C, C): 16
  // f32 tensors of (B, T, C).
  BOOST_TEST(estimate::block_activations(shape()).deferred == 16.0 * 4 * B * T * C);
  queue.run();
}

// A pipeline's last stage takes the list's loss fused with the head (Note [Fused head loss]):
// the same bytes as the whole GPT's, no logits.
BOOST_AUTO_TEST_CASE(stage_head_and_loss_keep_no_logits) {
  const nn::GPTConfig c = config();
  const nn::LayerList list = nn::gpt_layers(c);
  const int last = int(list.layers.size()) - 1;
  nn::PipelineStage head(list, {{last, last + 1}});
  head.train();
  const Tensor x = random_leaf({B, T, C}, 9);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back((i * 7) % c.vocab_size);
  const Tensor targets = Tensor::from_vector(ids, {B, T});
  const double before = in_use();
  const Tensor loss = head.forward_loss(0, x, targets);
  const double measured = in_use() - before - double(loss.nbytes()) + double(x.nbytes());
  const estimate::ActivationShape s = shape();
  BOOST_TEST(measured == estimate::head_activations(s).saved + estimate::fused_loss_activations(s).saved);
  // ln_f's input and statistics, the projection's input, lse, count.
  BOOST_TEST(measured == double(2 * 4 * B * T * C + 2 * 4 * B * T + 4 * B * T + 8));
  // The loss and gradients of the logits made whole, within rounding.
  backward(loss);
  std::vector<Tensor> fused_grads = {ops::clone(grad(x))};
  for (const auto& [name, p] : head.named_parameters()) fused_grads.push_back(ops::clone(grad(p)));
  head.zero_grad();
  Tensor x2 = ops::clone(x);
  set_requires_grad(x2);
  const Tensor whole = list.loss(head.forward_chunk(0, x2), targets);
  backward(whole);
  BOOST_TEST(loss.item() == whole.item(), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(test::max_abs_diff(fused_grads[0], grad(x2)) < 1e-6);
  const auto params = head.named_parameters();
  for (size_t i = 0; i < params.size(); ++i)
    BOOST_TEST(test::max_abs_diff(fused_grads[i + 1], grad(params[i].second)) < 1e-6, params[i].first);
}

// Without pipeline stages the loss is fused with the head (GPT::loss): ln_f's input and
// statistics, its output (the fused loss's input), each row's log-sum-exp and the count.
BOOST_AUTO_TEST_CASE(fused_head_loss_keeps_no_logits) {
  const nn::GPTConfig c = config();
  nn::GPT model(c);
  model.train();
  const Tensor x = random_leaf({B, T, C}, 9);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back((i * 7) % c.vocab_size);
  const Tensor targets = Tensor::from_vector(ids, {B, T});
  const double before = in_use();
  const Tensor loss = model.parallelism().head_loss((*model.ln_f)(x), model.wte->weight, targets, c.vocab_size);
  const double measured = in_use() - before - double(loss.nbytes()) + double(x.nbytes());
  const estimate::ActivationShape s = shape();
  BOOST_TEST(measured == estimate::head_activations(s).saved + estimate::fused_loss_activations(s).saved);
  BOOST_TEST(measured == double(2 * 4 * B * T * C + 2 * 4 * B * T + 4 * B * T + 8));
}

BOOST_AUTO_TEST_CASE(embedding_keeps_nothing_new_on_one_rank) {
  const nn::LayerList list = nn::gpt_layers(config());
  nn::PipelineStage embedding(list, {{0, 1}});
  embedding.train();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back(i % 50);
  const Tensor tokens = Tensor::from_vector(ids, {B, T});
  const double before = in_use();
  const Tensor y = embedding.forward_chunk(0, tokens);
  BOOST_TEST(in_use() - before - double(y.nbytes()) == estimate::embedding_activations(shape()).saved);
  BOOST_TEST(estimate::embedding_activations(shape()).saved == 0.0);
}

BOOST_AUTO_TEST_CASE(bf16_on_a_gpu_halves_the_product_operands_and_defers_nothing) {
  const estimate::ActivationShape s = estimate::activation_shape(config(), B, T, 1, false, DType::bf16, true);
  BOOST_TEST(s.product_bytes == 2);
  // 10 of the 16 tensors are product operands: 2 bytes fewer each.
  BOOST_TEST(estimate::block_activations(shape()).saved - estimate::block_activations(s).saved == 10.0 * 2 * B * T * C);
  BOOST_TEST(estimate::block_activations(s).deferred == 0.0);
}

BOOST_AUTO_TEST_CASE(tensor_parallel_divides_the_split_activations) {
  // tp 2: the heads' tensors (q, k, v and the output proj reads: 4; GELU in and out: 12 of
  // 16) halve; the LayerNorms' and the qkv and fc inputs (4) stay whole.
  const estimate::ActivationShape s = estimate::activation_shape(config(), B, T, 2, false, DType::f32, false);
  const double BTC = double(B * T * C);
  BOOST_TEST(estimate::block_activations(s).saved ==
             4 * (4 * BTC + 12 * BTC / 2) + 16.0 * B * T + 4.0 * B * (NH / 2) * T);
  // Sequence parallelism splits the LayerNorms' inputs and statistics too.
  const estimate::ActivationShape sp = estimate::activation_shape(config(), B, T, 2, true, DType::f32, false);
  BOOST_TEST(estimate::block_activations(sp).saved ==
             4 * (2 * BTC / 2 + 2 * BTC + 12 * BTC / 2) + 16.0 * B * T / 2 + 4.0 * B * (NH / 2) * T);
  // The padded vocabulary (64 rows): 32 per rank; the fused loss keeps no logits on any tp.
  BOOST_TEST(s.vocab_rows == 32);
  BOOST_TEST(estimate::fused_loss_activations(s).saved == 4.0 * B * T + 8);
}

BOOST_AUTO_TEST_SUITE_END()  // test_activation_bytes
